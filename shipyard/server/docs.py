"""/docs: the OpenAPI description as one page, made here from the schema (the usual Swagger UI loads its
code from a CDN, and the server's pages load nothing from anywhere else). /openapi.json has the schema."""

from __future__ import annotations

from html import escape

STYLE = "/static/app.css"


def page(schema: dict) -> str:
    info = schema["info"]
    parts = [f"<h1>{escape(info['title'])} API</h1>", f"<p>{escape(info.get('description', ''))}</p>",
             '<p>The schema: <a href="/openapi.json">/openapi.json</a>. The dashboard: <a href="/">/</a>.</p>']
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            parts.append(f'<section class="op"><h2><span class="method {escape(method)}">{escape(method.upper())}'
                         f"</span> <code>{escape(path)}</code></h2>")
            parts.append(f"<p>{escape(op.get('summary', ''))}</p>")
            if op.get("description"):
                parts.append(f"<p class=\"muted\">{escape(op['description'])}</p>")
            parameters = op.get("parameters", [])
            if parameters:
                rows = "".join(f"<tr><td><code>{escape(p['name'])}</code></td><td>{escape(p['in'])}</td>"
                               f"<td>{escape(_type(p.get('schema', {})))}</td><td>{'yes' if p.get('required') else ''}</td>"
                               f"<td>{escape(p.get('description', '') or p.get('schema', {}).get('description', ''))}</td></tr>"
                               for p in parameters)
                parts.append("<table><tr><th>parameter</th><th>in</th><th>type</th><th>required</th><th></th></tr>"
                             f"{rows}</table>")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                parts.append(f"<p>Body: <code>{escape(_type(_resolve(schema, body)))}</code></p>")
            parts.append("</section>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>shipyard API</title>'
            f'<link rel="stylesheet" href="{STYLE}"></head><body class="docs">' + "\n".join(parts) + "</body></html>")


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    if not ref:
        return node
    found = schema
    for key in ref.removeprefix("#/").split("/"):
        found = found[key]
    return found


def _type(node: dict) -> str:
    if "properties" in node:
        required = set(node.get("required", ()))
        return "{" + ", ".join(f"{k}{'' if k in required else '?'}: {_type(v)}"
                               for k, v in node["properties"].items()) + "}"
    if "anyOf" in node:
        return " | ".join(_type(n) for n in node["anyOf"])
    if "enum" in node:
        return " | ".join(repr(v) for v in node["enum"])
    return node.get("type", "any")
