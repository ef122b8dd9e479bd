"""Simulated kubelets: what each NVIDIA image does on a simulated GPU node.

``state`` holds one node's GPU facts (:class:`~gpuplan.sim.kubelet.state.NodeGpuState`); ``images`` tells
which NVIDIA component a pod runs; ``rules`` turns (pod, node state) into a pod outcome and node effects, with
one module per component (``driver``, ``toolkit``, ``device_plugin``, ``gfd``, ``dcgm``, ``validator``). These
are pure functions; the per-node runtime that applies them through the store lives beside them.
"""
