"""Generated OpenAPI v3 schema data for the simulator's built-in kinds (``schemas.json.gz``).

Produced by ``python -m gpuplan.sim.api.gen_openapi`` from the kubernetes-validate package and read by
:mod:`gpuplan.sim.api.openapi`. A package (not a plain folder) so that the data file ships in the wheel.
"""
