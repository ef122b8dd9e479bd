"""``python -m gpuplan``."""

from gpuplan.cli import main

main()
