"""Compile farms: the builds of a run as tasks on a Ray cluster (``neuronc compile --executor ray``).

``RayExecutor`` is passed to ``compile_profiles(executor=...)``; ``RaySettings`` says where the
cluster is and what every build asks of it; ``placement`` is what `neuronc plan --executor ray`
shows. Importing this package does not import Ray: connecting does (``pip install 'neuronc[ray]'``).
Modules: ``cluster`` (nodes, needs, fit, the shared-store probe), ``task`` (what runs on a node),
``executor`` (the driver).
"""

from neuronc.pipeline.farm.cluster import Need, Node, RaySettings
from neuronc.pipeline.farm.executor import RayExecutor, placement

__all__ = ["Need", "Node", "RayExecutor", "RaySettings", "placement"]
