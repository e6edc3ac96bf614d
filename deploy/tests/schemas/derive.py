"""Derives the vendored schemas in this folder from published CustomResourceDefinitions.

    python deploy/tests/schemas/derive.py CRD.yaml...

For every version a CRD serves, writes `<group>_<version>_<Kind>.json`: its `openAPIV3Schema` with the
`description` texts removed (they are most of a CRD's size and take no part in validation) and nothing else
changed. README.md beside this file names the CRDs these came from (project, release, commit, path, sha256)."""

import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def without_descriptions(node):
    if isinstance(node, dict):
        # A `description` text is an annotation; a property named `description` has a schema (a dict) and stays.
        return {k: without_descriptions(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def derive(path):
    with open(path) as f:
        for crd in yaml.safe_load_all(f):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                out = os.path.join(HERE, f"{spec['group']}_{version['name']}_{spec['names']['kind']}.json")
                schema = without_descriptions(version["schema"]["openAPIV3Schema"])
                with open(out, "w") as o:
                    json.dump(schema, o, sort_keys=True, separators=(",", ":"))
                    o.write("\n")
                print(f"{path}: wrote {os.path.basename(out)}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        derive(p)
