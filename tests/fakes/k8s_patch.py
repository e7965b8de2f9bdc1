"""JSON patch (RFC 6902), JSON merge patch (RFC 7386) and label/field selectors for the fake Kubernetes API.

Small, strict implementations: a failing ``test`` op or a bad path raises :class:`PatchError`, which the fake
answers with 422 exactly like the real API server (``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``).
"""

from __future__ import annotations

import copy
import re
from typing import Any


class PatchError(Exception):
    pass


class SelectorError(Exception):
    pass


# ---------------------------------------------------------------------------------------------- JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            if part not in node:
                raise PatchError(f"doc is missing path: {path}")
            node = node[part]
        elif isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise PatchError(f"doc is missing path: {path}")
        else:
            raise PatchError(f"doc is missing path: {path}")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, key = _parent(doc, parts, path)
    try:
        return parent[int(key)] if isinstance(parent, list) else parent[key]
    except (KeyError, ValueError, IndexError, TypeError):
        raise PatchError(f"doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, key = _parent(doc, parts, path)
    if isinstance(parent, list):
        if key == "-":
            parent.append(value)
        else:
            try:
                index = int(key)
            except ValueError:
                raise PatchError(f"invalid array index {key!r} in {path}")
            if not 0 <= index <= len(parent):
                raise PatchError(f"index out of bounds in {path}")
            parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[key] = value
    else:
        raise PatchError(f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, key = _parent(doc, parts, path)
    try:
        if isinstance(parent, list):
            del parent[int(key)]
        else:
            del parent[key]
    except (KeyError, ValueError, IndexError, TypeError):
        raise PatchError(f"doc is missing path: {path}")
    return doc


def apply_json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _remove(doc, path) if _pointer(path) else doc
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test operation does not apply")
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        else:
            raise PatchError(f"unexpected kind of operation {kind!r}")
    return doc


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386. Strategic merge patch is approximated by this (lists are replaced, not merged by key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------------------------------------- selectors

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    for req in _split(selector):
        eq = _EQ_RE.match(req)
        if eq:
            key, op, value = eq.groups()
            if op == "!=":
                if labels.get(key) == value:
                    return False
            elif labels.get(key) != value:
                return False
            continue
        st = _SET_RE.match(req)
        if not st:
            raise SelectorError(f"unable to parse requirement: {req!r}")
        negate, key, op, values = st.groups()
        if op is None:
            if bool(negate) == (key in labels):
                return False
            continue
        allowed = {v.strip() for v in values.split(",")}
        if op == "in" and labels.get(key) not in allowed:
            return False
        if op == "notin" and labels.get(key) in allowed:
            return False
    return True


def match_labels_selector(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions), as PDBs use."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


POD_FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name", ""),
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
    "spec.schedulerName": lambda o: (o.get("spec") or {}).get("schedulerName", "default-scheduler"),
    "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
}
NODE_FIELDS = {"metadata.name": lambda o: o["metadata"].get("name", ""),
               "spec.unschedulable": lambda o: str(bool((o.get("spec") or {}).get("unschedulable"))).lower()}
GENERIC_FIELDS = {"metadata.name": POD_FIELDS["metadata.name"], "metadata.namespace": POD_FIELDS["metadata.namespace"]}


def field_selector_matches(selector: str | None, obj: dict[str, Any], fields: dict[str, Any]) -> bool:
    if not selector:
        return True
    for req in selector.split(","):
        match = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", req)
        if not match:
            raise SelectorError(f"invalid field selector requirement {req!r}")
        key, op, value = match.groups()
        if key not in fields:
            raise SelectorError(f'field label not supported: {key}')
        actual = fields[key](obj)
        if (op == "!=") == (actual == value):
            return False
    return True
