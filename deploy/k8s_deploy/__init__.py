"""Kubernetes manifests rendered from model_repository/serving.toml (docs/scale-out.md).

`render_*` functions are pure (ServingSpec + partition plan -> dicts); `tree` lays them out as a
Kustomize tree under deploy/ and is the only writer; `validate` checks the tree with real tools
(kubectl kustomize, kubernetes-validate, the Prometheus Operator's CRD models, promtool).
"""
