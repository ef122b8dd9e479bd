"""The releases gpuplan knows of each component's image, to warn about a version that was never released.

``gpuplan validate`` (``planner.spec.compat.check_releases``) warns when a component gpuplan owns names a
version that is not here: its pods would never pull (``ErrImagePull``, then ``ImagePullBackOff``). A warning,
not an error: a release newer than this table is real too. The tags are those of the images gpuplan renders
with their default repository and image (a digest, or another image name, is not checked), from the same
sources as the simulator's registry catalog (``sim/kubelet/image_catalog.yaml``: upstream release tags, the
flavours their build files push, the GPU Operator's Helm values release by release, and the v26.7.x patch
releases gpuplan defaults to, docs/design.md section 3.1). ``tests/sim/runtime/test_image_catalog.py`` keeps
both in step. Driver versions are without the ``-<os>`` suffix the driver module appends.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpuplan.modules.base import ComponentName


def _tags(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# nvcr.io/nvidia/k8s-device-plugin
DEVICE_PLUGIN = _tags(
    """
    v0.9.0 v0.10.0 v0.11.0 v0.12.0 v0.12.1 v0.12.2 v0.12.3 v0.12.3-ubi8 v0.13.0 v0.13.0-ubi8 v0.14.0
    v0.14.0-ubi8 v0.14.1 v0.14.1-ubi8 v0.14.2 v0.14.2-ubi8 v0.14.3 v0.14.3-ubi8 v0.14.4 v0.14.5
    v0.14.5-ubi8 v0.15.0 v0.15.0-ubi8 v0.15.1 v0.16.0 v0.16.1 v0.16.1-ubi8 v0.16.2 v0.16.2-ubi8 v0.17.0
    v0.17.0-ubi9 v0.17.1 v0.17.2 v0.17.3 v0.17.4 v0.18.0 v0.18.1 v0.18.2 v0.19.0 v0.19.1 v0.19.2 v0.19.3
    v0.20.0 v0.20.1
    """
)
# GFD runs from the device plugin's image since v0.15.0 (k8s-device-plugin CHANGELOG, v0.15.0-rc.1)
GFD = DEVICE_PLUGIN[DEVICE_PLUGIN.index("v0.15.0") :]
# nvcr.io/nvidia/k8s/dcgm-exporter
DCGM_EXPORTER = _tags(
    """
    3.0.4-3.0.0-ubi8 3.0.4-3.0.0-ubuntu20.04 3.1.3-3.1.2-ubi8 3.1.3-3.1.2-ubuntu20.04 3.1.6-3.1.3-ubi8
    3.1.6-3.1.3-ubuntu20.04 3.1.7-3.1.4-ubi8 3.1.7-3.1.4-ubuntu20.04 3.1.8-3.1.5-ubi8
    3.1.8-3.1.5-ubuntu20.04 3.2.5-3.1.7-ubi8 3.2.5-3.1.7-ubuntu20.04 3.2.6-3.1.9-ubuntu20.04
    3.3.0-3.2.0-ubi9 3.3.0-3.2.0-ubuntu22.04 3.3.3-3.3.0-ubi9 3.3.3-3.3.0-ubuntu22.04 3.3.3-3.3.1-ubi9
    3.3.3-3.3.1-ubuntu22.04 3.3.5-3.4.0-ubi9 3.3.5-3.4.0-ubuntu22.04 3.3.5-3.4.1-ubi9
    3.3.5-3.4.1-ubuntu22.04 3.3.6-3.4.2-ubi9 3.3.6-3.4.2-ubuntu22.04 3.3.7-3.5.0-ubi9
    3.3.7-3.5.0-ubuntu22.04 3.3.8-3.6.0-ubi9 3.3.8-3.6.0-ubuntu22.04 3.3.9-3.6.1-ubi9
    3.3.9-3.6.1-ubuntu22.04 4.0.0-4.0.1-ubi9 4.0.0-4.0.1-ubuntu22.04 4.1.1-4.0.3-ubi9
    4.1.1-4.0.3-ubuntu22.04 4.1.1-4.0.4-ubi9 4.1.1-4.0.4-ubuntu22.04 4.2.0-4.1.0-ubi9
    4.2.0-4.1.0-ubuntu22.04 4.2.3-4.1.1-ubi9 4.2.3-4.1.1-ubuntu22.04 4.2.3-4.1.3-ubi9
    4.2.3-4.1.3-ubuntu22.04 4.2.3-4.2.0-ubi9 4.2.3-4.2.0-ubuntu22.04 4.3.1-4.4.0-ubi9
    4.3.1-4.4.0-ubuntu22.04 4.4.0-4.5.0-distroless 4.4.0-4.5.0-ubi9 4.4.0-4.5.0-ubuntu22.04
    4.4.1-4.5.2-distroless 4.4.1-4.5.2-ubi9 4.4.1-4.5.2-ubuntu22.04 4.4.1-4.6.0-distroless
    4.4.1-4.6.0-ubi9 4.4.1-4.6.0-ubuntu22.04 4.4.2-4.7.0-distroless 4.4.2-4.7.0-ubi9
    4.4.2-4.7.0-ubuntu22.04 4.4.2-4.7.1-distroless 4.4.2-4.7.1-ubi9 4.4.2-4.7.1-ubuntu22.04
    4.5.1-4.8.0-distroless 4.5.1-4.8.0-ubi9 4.5.1-4.8.0-ubuntu22.04 4.5.2-4.8.1-distroless
    4.5.2-4.8.1-ubi9 4.5.2-4.8.1-ubuntu22.04 4.5.3-4.8.2-distroless 4.5.3-4.8.2-ubi9
    4.5.3-4.8.2-ubuntu22.04 4.6.0-4.8.3-distroless 4.6.0-4.8.3-ubi9 4.6.0-4.8.3-ubuntu22.04
    """
)
# nvcr.io/nvidia/k8s/container-toolkit
TOOLKIT = _tags(
    """
    v1.11.0-ubi8 v1.11.0-ubuntu20.04 v1.12.0-ubi8 v1.12.0-ubuntu20.04 v1.12.1-ubi8 v1.12.1-ubuntu20.04
    v1.13.0-ubi8 v1.13.0-ubuntu20.04 v1.13.1-ubi8 v1.13.1-ubuntu20.04 v1.13.2-ubi8 v1.13.2-ubuntu20.04
    v1.13.3-ubi8 v1.13.3-ubuntu20.04 v1.13.4-ubi8 v1.13.4-ubuntu20.04 v1.13.5-ubi8 v1.13.5-ubuntu20.04
    v1.14.0-ubi8 v1.14.0-ubuntu20.04 v1.14.1-ubi8 v1.14.1-ubuntu20.04 v1.14.2-ubi8 v1.14.2-ubuntu20.04
    v1.14.3-ubi8 v1.14.3-ubuntu20.04 v1.14.4-ubi8 v1.14.4-ubuntu20.04 v1.14.5-ubi8 v1.14.5-ubuntu20.04
    v1.14.6-ubi8 v1.14.6-ubuntu20.04 v1.15.0-ubi8 v1.15.0-ubuntu20.04 v1.16.0-ubi8 v1.16.0-ubuntu20.04
    v1.16.1-ubi8 v1.16.1-ubuntu20.04 v1.16.2-ubi8 v1.16.2-ubuntu20.04 v1.17.0-ubi8 v1.17.0-ubuntu20.04
    v1.17.1-ubi8 v1.17.1-ubuntu20.04 v1.17.2-ubi8 v1.17.2-ubuntu20.04 v1.17.3-ubi8 v1.17.3-ubuntu20.04
    v1.17.4-ubi8 v1.17.4-ubuntu20.04 v1.17.5-ubi8 v1.17.5-ubuntu20.04 v1.17.6-ubi8 v1.17.6-ubuntu20.04
    v1.17.7-ubi8 v1.17.7-ubuntu20.04 v1.17.8-ubi8 v1.17.8-ubuntu20.04 v1.17.9-ubi8 v1.17.9-ubuntu20.04
    v1.18.0 v1.18.1 v1.18.2 v1.19.0 v1.19.1 v1.20.0 v1.20.1
    """
)
# nvcr.io/nvidia/gpu-operator (the validator runs the operator's image since v25.10)
VALIDATOR = _tags(
    """
    v22.9.0 v22.9.1 v22.9.2 v23.3.0 v23.3.1 v23.3.2 v23.6.0 v23.6.1 v23.6.2 v23.9.0 v23.9.1 v23.9.2
    v24.3.0 v24.6.0 v24.6.1 v24.6.2 v24.9.0 v24.9.1 v24.9.2 v25.3.0 v25.3.1 v25.3.2 v25.3.3 v25.3.4
    v25.10.0 v25.10.1 v26.3.0 v26.3.1 v26.3.2 v26.3.3 v26.7.0
    """
)
# nvcr.io/nvidia/driver:<version>-<os>
DRIVER = _tags(
    """
    450.172.01 450.191.01 450.203.03 450.216.04 450.236.01 450.248.02 470.103.01 470.129.06 470.141.03
    470.161.03 470.182.03 470.199.02 470.223.02 470.239.06 470.256.02 510.47.03 510.73.08 510.85.02
    510.108.03 515.48.07 515.65.01 515.86.01 515.105.01 525.60.13 525.85.12 525.105.17 525.125.06
    525.147.05 535.54.03 535.86.10 535.104.05 535.104.12 535.129.03 535.154.05 535.161.07 535.161.08
    535.183.01 535.183.06 535.216.01 535.216.03 535.230.02 535.247.01 535.261.03 535.274.02 535.288.01
    535.309.01 550.54.14 550.54.15 550.90.07 550.90.12 550.127.05 550.127.08 550.144.03 550.163.01
    560.35.03 565.57.01 570.86.15 570.124.06 570.133.20 570.148.08 570.158.01 570.172.08 570.195.03
    570.211.01 575.57.08 580.65.06 580.82.07 580.95.05 580.105.08 580.126.09 580.126.16 580.126.20
    580.159.03 580.159.04 580.167.08 580.173.02 580.178.04 590.48.01 595.58.03 595.71.05 595.91.07
    610.57.04
    """
)
# nvcr.io/nvidia/cloud-native/k8s-driver-manager
DRIVER_MANAGER = _tags(
    """
    v0.4.0 v0.4.1 v0.4.2 v0.5.0 v0.5.1 v0.6.0 v0.6.1 v0.6.2 v0.6.3 v0.6.4 v0.6.5 v0.6.6 v0.6.7 v0.6.8
    v0.6.9 v0.6.10 v0.7.0 v0.8.0 v0.8.1 v0.9.0 v0.9.1 v0.10.0 v0.11.0 v0.12.0
    """
)

# nvcr.io/nvidia/cloud-native/k8s-mig-manager
MIG_MANAGER = _tags(
    """
    v0.5.0-ubuntu20.04 v0.5.1-ubuntu20.04 v0.5.2-ubuntu20.04 v0.5.3-ubuntu20.04 v0.5.4-ubuntu20.04
    v0.5.5-ubuntu20.04 v0.6.0-ubuntu20.04 v0.7.0-ubuntu20.04 v0.8.0-ubuntu20.04 v0.9.0-ubuntu20.04
    v0.9.1-ubuntu20.04 v0.10.0-ubuntu20.04 v0.11.0-ubuntu20.04 v0.12.0-ubuntu20.04 v0.12.1-ubuntu20.04
    v0.12.2-ubuntu20.04 v0.12.3-ubuntu20.04 v0.13.0 v0.13.1 v0.14.0 v0.14.1 v0.14.2 v0.14.3 v0.14.4
    v0.14.5 v0.15.0
    """
)

KNOWN: Mapping[ComponentName, tuple[str, ...]] = MappingProxyType(
    {
        "driver": DRIVER,
        "toolkit": TOOLKIT,
        "devicePlugin": DEVICE_PLUGIN,
        "gfd": GFD,
        "dcgmExporter": DCGM_EXPORTER,
        "validator": VALIDATOR,
        "migManager": MIG_MANAGER,
    }
)
"""Known versions of each component's image, oldest first."""
