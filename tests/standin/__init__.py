"""A kubelet + kube-proxy stand-in for tests (there is no container runtime here).

See tests/standin/standin.py and docs/kubernetes.md ("The pod stand-in").
"""

from .images import catalog_image, catalog_tree, operator_image, redis_image
from .pods import Image
from .standin import NODE_NAME, StandIn, wait_until

__all__ = [
    "NODE_NAME",
    "Image",
    "StandIn",
    "catalog_image",
    "catalog_tree",
    "operator_image",
    "redis_image",
    "wait_until",
]
