"""The harness: benchmark and experiment harness for context engineering in long-horizon tool-using agents."""

import os

# onnxruntime 1.30 (WAAC's MiniLM embedder runs on it) starts Microsoft's 1DS telemetry at import on Linux: it
# writes ~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db and /tmp/mat-debug-<pid>.log and would send
# events to Microsoft. Its documented opt-out must be set before the library initializes; every harness process
# imports this package first, so it is set here (a user's own ORT_DISABLE_TELEMETRY=0 is left as it is).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
