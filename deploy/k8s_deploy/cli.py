"""`python -m k8s_deploy render|validate`: the manifests under deploy/ from serving.toml, and their checks.

render     write deploy/kustomize, deploy/prometheus-adapter, deploy/nvidia-device-plugin (`--check`: only compare)
validate   the committed files == a fresh rendering, then kubectl kustomize, kubernetes-validate (strict),
           the Prometheus Operator CRD schemas, cross-references and promtool (docs/scale-out.md)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from k8s_deploy.errors import DeployError
from k8s_deploy.tree import DEPLOY_ROOT, render_files, source_name, stale_files, write_files

DEFAULT_CONFIG = DEPLOY_ROOT.parent / "model_repository" / "serving.toml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k8s_deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="serving.toml to render from")
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", help="write the rendered manifests under deploy/")
    render.add_argument("--check", action="store_true", help="only report files that differ from the rendering")
    sub.add_parser("validate", help="check the rendered tree with kubectl, kubernetes-validate, CRD schemas, promtool")
    args = parser.parse_args(argv)
    from contracts.errors import ServingError
    from contracts.serving_spec import load_serving_spec

    try:
        spec = load_serving_spec(args.config)
        if args.command == "render":
            files = render_files(spec, source=source_name(args.config))
            if args.check:
                problems = stale_files(files)
                for line in problems:
                    print(f"k8s_deploy: {line}", file=sys.stderr)
                return 1 if problems else 0
            changed = write_files(files)
            print(f"[k8s] rendered {len(files)} files under {DEPLOY_ROOT}" + (f"; changed: {', '.join(changed)}" if changed else "; unchanged"))
        else:
            from k8s_deploy.validate import validate_all

            for line in validate_all(spec=spec, source=source_name(args.config)):
                print(f"[k8s] {line}")
    except (DeployError, ServingError) as exc:
        print(f"k8s_deploy: error: {exc}", file=sys.stderr)
        return 1
    return 0
