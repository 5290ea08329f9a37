"""Schema validation of every Kubernetes manifest under deploy/kubernetes, offline.

Built-in kinds are validated with kubernetes-validate (the API's OpenAPI schemas, bundled
with it) in strict mode, so an unknown or misspelt field fails, once for each Kubernetes
version given. Kinds from a CRD are not in those schemas; the ones used here are checked
against models generated from their project's CRD (KEDA's ScaledObject), with unknown fields
reported too. A kind neither knows fails: nothing is passed unchecked.

Usage: python validate_manifests.py [--kubernetes-version V]... [DIR]
Prints one line per document and version, then `N passed, M failed`; exits 1 on a failure.
"""

import argparse
import json
import pathlib
import sys
import types
import typing

import kubernetes_validate
import pydantic
import yaml

# Kustomize's own configuration, not a resource sent to the API server.
NOT_RESOURCES = {"kustomization.yaml"}


def documents(root):
    """(file, index, document) for every YAML document under root, in a stable order."""
    for path in sorted(root.rglob("*.yaml")):
        if path.name in NOT_RESOURCES:
            continue
        with path.open() as stream:
            for index, document in enumerate(yaml.safe_load_all(stream)):
                if document is not None:
                    yield path.relative_to(root), index, document


def unknown_fields(model, data, where):
    """Keys of `data` that `model` (a pydantic model) has no field for, recursively.

    pydantic ignores unknown keys, while the API server rejects them (or, worse, drops them
    silently), so they are looked for here by walking the model's fields by their aliases."""
    if not isinstance(data, dict):
        return []
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    problems = []
    for key, value in data.items():
        info = fields.get(key)
        if info is None:
            problems.append(f"{where}.{key}: no such field in {model.__name__}")
        else:
            problems += unknown_in(info.annotation, value, f"{where}.{key}")
    return problems


def unknown_in(annotation, value, where):
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return unknown_in(typing.get_args(annotation)[0], value, where)
    if origin in (typing.Union, types.UnionType):
        problems = []
        for option in typing.get_args(annotation):
            if option is not type(None):
                problems += unknown_in(option, value, where)
        return problems
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(annotation)
        return [p for i, v in enumerate(value) for p in unknown_in(item, v, f"{where}[{i}]")]
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return unknown_fields(annotation, value, where)
    return []  # scalars and free-form maps (labels, trigger metadata)


def validate_keda(document):
    from cloudcoil.models.keda import v1alpha1

    model = getattr(v1alpha1, document.get("kind", ""), None)
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        return [f"no KEDA model for kind {document.get('kind')!r}"]
    problems = unknown_fields(model, document, document["kind"])
    try:
        # Through JSON and strict: "5" is not an integer, as for the API server.
        model.model_validate_json(json.dumps(document), strict=True)
    except pydantic.ValidationError as error:
        problems.append(str(error))
    return problems


# API groups defined by CRDs, and how their kinds are checked.
CRD_VALIDATORS = {"keda.sh": ("KEDA 2.16 CRD models", validate_keda)}


def validate(document, version):
    """(what checked it, problems) for one document."""
    group = document.get("apiVersion", "").rpartition("/")[0]
    if group in CRD_VALIDATORS:
        checker, check = CRD_VALIDATORS[group]
        return checker, check(document)
    checker = f"Kubernetes {version} schema (strict)"
    try:
        kubernetes_validate.validate(document, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return checker, [f"no schema for {document.get('apiVersion')} {document.get('kind')} "
                         "(a CRD this validator does not know, or an API this version lacks)"]
    except kubernetes_validate.ValidationError as error:
        return checker, [error.message + " at " + "/".join(str(p) for p in error.absolute_path)]
    return checker, []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubernetes-version", action="append", dest="versions")
    parser.add_argument("root", nargs="?", default=pathlib.Path(__file__).parent.parent / "kubernetes",
                        type=pathlib.Path)
    arguments = parser.parse_args()
    versions = arguments.versions or [kubernetes_validate.latest_version()]
    passed = failed = 0
    for path, index, document in documents(arguments.root):
        name = f"{path}#{index} {document.get('kind')}/{document.get('metadata', {}).get('name')}"
        seen = set()
        for version in versions:
            checker, problems = validate(document, version)
            if checker in seen:
                continue  # a CRD's check does not depend on the Kubernetes version
            seen.add(checker)
            if problems:
                failed += 1
                print(f"FAIL {name} ({checker})")
                for problem in problems:
                    print("    " + problem.replace("\n", "\n    "))
            else:
                passed += 1
                print(f"ok   {name} ({checker})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
