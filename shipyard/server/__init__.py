"""`shipyard server`: a JSON API over the store the CLI uses, and the dashboard that reads it.

`app.py` makes the FastAPI application from the route modules `ROUTES` names (one per resource: jobs,
tuning, pools, costs) and the security around them (`auth.py`); `serve.py` starts it with uvicorn and
writes `$SHIPYARD_HOME/server.json`; `static/` is the dashboard, plain HTML, CSS and JavaScript served as
they are (nothing to build). The server only reads what controllers write and acts through the same
calls the CLI makes, so jobs neither wait for it nor need it (docs/server.md)."""
