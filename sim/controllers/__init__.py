"""The simulated cluster's controllers, all driven by one loop thread (``loop.Loop``).

``cache`` (the informer cache), ``loop`` (events, timers, calls from other threads), ``scheduling`` (which
nodes a DaemonSet pod belongs on), ``daemonset`` (the DaemonSet controller) and ``nodes`` (node lifecycle:
NotReady and back). Garbage collection needs no controller here: the store cascades deletions through
ownerReferences itself (see ``gpuplan.sim.api.store``). Wired together by ``gpuplan.sim.cluster.Simulator``.
"""
