"""`neuronc serve`: an OpenAI-compatible HTTP server for CPU (inductor) bundles, batched over their compiled shapes.

- ``protocol``: the request bodies of ``/v1/completions`` and ``/v1/chat/completions``, checked field by
  field (a bad field is a 400 that names it), and the response documents;
- ``engine``: the batching scheduler: one thread that owns the runner, admits requests into the
  bundle's batch slots as they free up (continuous batching: the graphs take a position per row)
  and steps every active row at once;
- ``sampling`` and ``detok``: per-request sampling (temperature, top_p, seed) and text (incremental
  decoding, stop strings);
- ``app``: the Starlette application (routes, server-sent events, access log);
- ``server``: the checks before the port opens, loading, uvicorn, and the bounded shutdown.

Importing this package is cheap; torch, Starlette and uvicorn are imported by the modules that use them.
"""

from __future__ import annotations
