"""Child-process entry point of a Neuron compile: ``python -m neuronc.backends.neuron.worker JOB RESULT``.

The parent (``neuron.isolated.run_isolated``) has already set the environment and the working
directory, and sends stdout/stderr to the bundle's compile log. This process imports the SDK, runs
the backend's ``compile_in_process`` and writes the result, or the error, as JSON.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    job_file, result_file = Path(argv[0]), Path(argv[1])
    from neuronc.backends import resolve_backend
    from neuronc.backends.neuron.common import NeuronBackend
    from neuronc.backends.neuron.isolated import EVENTS_FILE, EventSink, job_from_json, result_to_json
    from neuronc.errors import NeuroncError

    data = json.loads(job_file.read_text(encoding="utf-8"))
    job = job_from_json(data)
    job.progress = EventSink(job.work_dir / EVENTS_FILE)
    # A process boundary: the job names its backend; resolved here, once (this package's own registry).
    backend = resolve_backend(data["backend"])
    if not isinstance(backend, NeuronBackend):
        result_file.write_text(json.dumps({"error": {"type": "TypeError", "message": "not a Neuron backend"}}))
        return 2
    try:
        result = backend.compile_in_process(job)
    except NeuroncError as exc:
        traceback.print_exc()
        error = {
            "neuronc": True,
            "class": type(exc).__name__,
            "message": exc.message,
            "hint": exc.hint,
            "details": exc.details,
        }
        result_file.write_text(json.dumps({"error": error}), encoding="utf-8")
        return 1
    except Exception as exc:  # the process boundary: whatever the SDK raised is reported to the parent
        traceback.print_exc()
        error = {"type": type(exc).__name__, "message": str(exc)}
        result_file.write_text(json.dumps({"error": error}), encoding="utf-8")
        return 1
    result_file.write_text(json.dumps({"result": result_to_json(result)}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
