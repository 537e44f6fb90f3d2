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
* answers every write with the object it was given, storing nothing.

Nothing reaches the cluster but discovery reads. Printed: the release's manifest and
its hooks (without `test` hooks under `--skip-tests`), as `helm template` prints them.
Not supported: charts with a `crds/` directory (Helm would wait for the CRDs to be
served), hooks that Helm waits for (Jobs, Pods) — the runner refuses hooks anyway.
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


def server(cluster):
    url, tls, token = cluster

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
            if not is_discovery(self.path):
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": "NotFound", "code": 404, "message": "not found"}
                return self.reply(404, json.dumps(status).encode())
            request = urllib.request.Request(url + self.path)
            if self.headers.get("Accept"):
                request.add_header("Accept", self.headers["Accept"])
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, context=tls) as answer:
                    code, body = answer.status, answer.read()
                    kind = answer.headers.get("Content-Type", "application/json")
            except urllib.error.HTTPError as err:
                code, body = err.code, err.read()
                kind = err.headers.get("Content-Type", "application/json")
            self.reply(code, body, kind)

        def echo(self, code):
            length = int(self.headers.get("Content-Length") or 0)
            kind = self.headers.get("Content-Type", "application/json")
            self.reply(code, self.rfile.read(length), kind)

        def do_POST(self):
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
    listener = server(upstream())
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
    documents = [release["manifest"]]
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
