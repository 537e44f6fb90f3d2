"""`helm template` for the tests, over helm-sdkpy (Helm 4's Go SDK embedded in Python).

The runner renders `helm_chart` components with `helm template` (its `--helm` binary).
The helm binary is not installed where the tests run; helm-sdkpy is, but it has no
`template` action. This shim takes the command line the runner gives `helm` and renders
with Helm's own engine: it runs helm-sdkpy's `install` (in-memory release storage,
`HELM_DRIVER=memory`) against a loopback API server of its own that

* forwards discovery (`/version`, `/api`, `/apis`, one group/version's resources,
  `/openapi`) to the cluster of `$KUBECONFIG`, so `.Capabilities` are the cluster's,
  read-only (token and CA of the kubeconfig's current context);
* answers every other read "not found" (a fresh install, as `helm template` renders);
* answers every write with the object it was given, storing nothing in the cluster.

A chart's `crds/` directory: Helm's install creates those CRDs first, waits for them
and then needs their kinds in discovery to build the templates' objects. The shim keeps
the CRDs Helm creates in memory (never in the cluster), answers their reads as
`Established`, and adds their kinds to the discovery it forwards (`/apis` is then asked
for in the plain `APIGroupList` form, so there is one list to extend). With
`--include-crds` they are printed first, as `helm template --include-crds` prints the
chart's `crds/` files, in the order Helm read them.

Nothing reaches the cluster but discovery reads. Printed: the CRDs (`--include-crds`),
the release's manifest and its hooks (without `test` hooks under `--skip-tests`), as
`helm template` prints them. Not supported: hooks that Helm waits for (Jobs, Pods) —
the runner refuses hooks anyway.
Only the flags the runner passes are accepted; `--kube-version` and `--api-versions`
are accepted and not needed (the cluster's own discovery answers).
"""

import argparse
import asyncio
import base64
import json
import os
import ssl
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

os.environ["HELM_DRIVER"] = "memory"
import helm_sdkpy as helm  # noqa: E402  (after HELM_DRIVER)


def arguments(argv):
    parser = argparse.ArgumentParser(prog="helm")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version")
    template = commands.add_parser("template")
    template.add_argument("release")
    template.add_argument("chart")
    template.add_argument("--namespace", "-n", default="default")
    template.add_argument("--values", "-f", action="append", default=[])
    template.add_argument("--version")
    template.add_argument("--kube-version")
    template.add_argument("--api-versions", action="append", default=[])
    template.add_argument("--include-crds", action="store_true")
    template.add_argument("--skip-tests", action="store_true")
    return parser.parse_args(argv)


def upstream():
    """The server, TLS context and token of `$KUBECONFIG`'s current context."""
    with open(os.environ["KUBECONFIG"]) as file:
        config = yaml.safe_load(file)
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    tls = ssl.create_default_context()
    if "certificate-authority-data" in cluster:
        tls.load_verify_locations(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
    elif "certificate-authority" in cluster:
        tls.load_verify_locations(cafile=cluster["certificate-authority"])
    return cluster["server"].rstrip("/"), tls, user.get("token")


def is_discovery(path):
    parts = [p for p in path.split("?")[0].split("/") if p]
    return (
        parts == ["version"]
        or parts[:1] == ["openapi"]
        or (parts[:1] == ["api"] and len(parts) <= 2)
        or (parts[:1] == ["apis"] and len(parts) <= 3)
    )


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Crds:
    """The CRDs Helm created during this rendering, by name, in creation order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.created = {}

    def add(self, body):
        crd = json.loads(body)
        with self.lock:
            self.created[crd["metadata"]["name"]] = crd

    def all(self):
        with self.lock:
            return list(self.created.values())

    def established(self, name):
        with self.lock:
            crd = self.created.get(name)
        if crd is None:
            return None
        crd = dict(crd)
        crd["status"] = {
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
            "conditions": [
                {"type": t, "status": "True", "reason": t, "message": t}
                for t in ("NamesAccepted", "Established")
            ],
        }
        return crd

    def versions(self):
        """{group: [served versions]} of the CRDs."""
        groups = {}
        for crd in self.all():
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    groups.setdefault(crd["spec"]["group"], []).append(version["name"])
        return groups

    def resources(self, group, version):
        """The APIResources the CRDs serve at group/version."""
        found = []
        for crd in self.all():
            spec = crd["spec"]
            served = any(v["name"] == version and v.get("served") for v in spec["versions"])
            if spec["group"] != group or not served:
                continue
            names = spec["names"]
            found.append({
                "name": names["plural"],
                "singularName": names.get("singular", names["kind"].lower()),
                "namespaced": spec["scope"] == "Namespaced",
                "kind": names["kind"],
                "shortNames": names.get("shortNames", []),
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch",
                          "update", "watch"],
            })
        return found


def server(cluster, crds):
    url, tls, token = cluster

    def forward(path, accept):
        request = urllib.request.Request(url + path)
        if accept:
            request.add_header("Accept", accept)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, context=tls) as answer:
                return (answer.status, answer.read(),
                        answer.headers.get("Content-Type", "application/json"))
        except urllib.error.HTTPError as err:
            return err.code, err.read(), err.headers.get("Content-Type", "application/json")

    def with_crds(path, accept):
        """Discovery with the CRDs' kinds, or None where they change nothing."""
        groups = crds.versions()
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts == ["apis"] and groups:
            code, body, _ = forward(path, "application/json")
            listed = json.loads(body) if code == 200 else {"kind": "APIGroupList", "groups": []}
            for group, versions in groups.items():
                if any(g["name"] == group for g in listed["groups"]):
                    continue
                entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
                listed["groups"].append(
                    {"name": group, "versions": entries, "preferredVersion": entries[0]})
            return json.dumps(listed).encode()
        if len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], []):
            group, version = parts[1], parts[2]
            code, body, _ = forward(path, "application/json")
            listed = json.loads(body) if code == 200 else {
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}", "resources": []}
            listed["resources"] += crds.resources(group, version)
            return json.dumps(listed).encode()
        return None

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, body, content_type="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path.startswith(CRDS + "/"):
                crd = crds.established(path[len(CRDS) + 1:])
                if crd is not None:
                    return self.reply(200, json.dumps(crd).encode())
            if not is_discovery(self.path):
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": "NotFound", "code": 404, "message": "not found"}
                return self.reply(404, json.dumps(status).encode())
            extended = with_crds(self.path, self.headers.get("Accept"))
            if extended is not None:
                return self.reply(200, extended)
            self.reply(*forward(self.path, self.headers.get("Accept")))

        def echo(self, code):
            length = int(self.headers.get("Content-Length") or 0)
            kind = self.headers.get("Content-Type", "application/json")
            self.reply(code, self.rfile.read(length), kind)

        def do_POST(self):
            if self.path.split("?")[0] == CRDS:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                crds.add(body)
                return self.reply(201, body, self.headers.get("Content-Type",
                                                               "application/json"))
            self.echo(201)

        def do_PUT(self):
            self.echo(200)

        def do_PATCH(self):
            self.echo(200)

    listener = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    return listener


def values(files):
    merged = {}
    for path in files:
        with open(path) as file:
            merged.update(yaml.safe_load(file) or {})
    return merged


async def template(args):
    crds = Crds()
    listener = server(upstream(), crds)
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "shim",
        "clusters": [{"name": "shim", "cluster": {
            "server": f"http://127.0.0.1:{listener.server_address[1]}"}}],
        "users": [{"name": "shim", "user": {}}],
        "contexts": [{"name": "shim", "context": {"cluster": "shim", "user": "shim"}}],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        json.dump(kubeconfig, file)
        file.flush()
        config = helm.Configuration(namespace=args.namespace, kubeconfig=file.name)
        release = await helm.Install(config).run(
            args.release, args.chart, values=values(args.values), version=args.version,
            wait=False, timeout=60,
        )
    documents = []
    if args.include_crds:
        for crd in crds.all():
            documents.append(f"---\n# Source: CustomResourceDefinition {crd['metadata']['name']}"
                             f"\n{json.dumps(crd)}")
    documents.append(release["manifest"])
    for hook in release.get("hooks") or []:
        if args.skip_tests and "test" in (hook.get("events") or []):
            continue
        documents.append(f"---\n# Source: {hook.get('path', '')}\n{hook['manifest']}")
    print("\n".join(d.rstrip("\n") for d in documents))


def main():
    args = arguments(sys.argv[1:])
    if args.command == "version":
        print(helm.get_version())
        return 0
    try:
        asyncio.run(template(args))
    except helm.HelmError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
