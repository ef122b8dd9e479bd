"""The simulated GPU cluster: a real Kubernetes HTTP API with controllers and simulated GPU nodes.

It is gpuplan's test bed, the embedded default of ``gpuplan demo``, and a rehearsal stage for users. It
depends on nothing of gpuplan's engine (checked by import-linter): to gpuplan it is just another cluster.
"""
