"""moto_server whose EKS clusters can be created where a test's stand-in cluster listens.

moto gives each EKS cluster a made-up endpoint (https://RANDOM.xxx.REGION.eks.amazonaws.com/)
and a random CA string. A cluster created with the tags

    outpost.test/endpoint  the API server's URL
    outpost.test/ca        its base64 PEM CA bundle

instead reports those in DescribeCluster, as real EKS reports the cluster it runs: the
test plays AWS creating the cluster where the stand-in listens. Everything else is
moto_server as it is, with the same command line (`-H HOST -p PORT`).
"""

import sys

from moto.eks.models import EKSBackend
from moto.server import main

ENDPOINT_TAG = "outpost.test/endpoint"
CA_TAG = "outpost.test/ca"

_create_cluster = EKSBackend.create_cluster


def create_cluster(self, *args, **kwargs):
    cluster = _create_cluster(self, *args, **kwargs)
    tags = cluster.tags or {}
    if ENDPOINT_TAG in tags:
        cluster.endpoint = tags[ENDPOINT_TAG]
    if CA_TAG in tags:
        cluster.certificate_authority = {"data": tags[CA_TAG]}
    return cluster


EKSBackend.create_cluster = create_cluster

if __name__ == "__main__":
    sys.exit(main())
