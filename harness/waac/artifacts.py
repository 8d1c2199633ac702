"""The runtime artifact store behind POINTER (A.3) and the recall tool offered to the agent.

A pointer names an object identity and version. The store keeps the field's *original bytes* — the exact span of
the original message content the field was read from — in a content-addressed file (named by its SHA-256) in a
directory, and records identity, version and checksum. A reference is honoured only if the file still exists,
its bytes still hash to the recorded checksum, that checksum is the one of the span in the (never modified)
trajectory, and identity and version are the field's; otherwise the projection promotes the field to EXACT and a
recall answers with a tool error naming what failed. A recall returns the original bytes byte-exact.

Verification cost. The projection verifies every live pointer at every step; re-reading and re-hashing each file
each time would grow with the history. A file that hashed right is remembered with its stat signature (inode,
size, mtime_ns, ctime_ns) and re-read only when the signature differs (one stat per live pointer and step); a
recall always re-reads and re-hashes. The signature is trusted only for a file whose ctime was already in the
past of the filesystem's clock when it was recorded (git's "racily clean" rule): its ctime is older than the
newest ctime this store has observed (of the files it wrote or checked, and of its directory, touched for a
fresh reading when a file is not settled yet: readings of that clock), or older than the system clock by
SETTLE_NS. Any later write, truncation, rename, deletion or utime then changes the signature
(ctime cannot be set by a user), so a changed or missing file is still detected at the next step; a file changed
within the clock tick of its signing is not trusted yet (re-hashed at each step until it is). The field's
original text is re-hashed only when it differs from the text last verified for that reference.

Where the files live: `directory` when given (shared, content-addressed, never deleted by the store), else a
temporary directory of this store, removed when the store is closed or garbage-collected. The runner builds one
policy per episode and the transcript already records the history these spans come from (as LCM's in-memory
store argues, harness/policies/lcm_store.py), so a per-episode temporary directory is the default. It is made
under /dev/shm (RAM-backed) when that is a writable directory with room (SCRATCH_FREE) and $TMPDIR is unset,
else in the system's temporary directory: creating a file on a disk-backed /tmp took ~0.5 ms on the issue-28
machine, ~0.03 ms on tmpfs, and a file is created for every new pointed-to value (same files, same checks).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import scratch
from harness.io import Signature, signature
from harness.types import ToolCall, ToolSpec
from harness.waac.schema import FieldSpec, Role, ToolSchema

SCRATCH = "/dev/shm"  # RAM-backed scratch for the per-episode temporary store, when usable
SCRATCH_FREE = 256 * 2**20  # bytes it must have free (a store holds one episode's pointed-to spans: ~MBs)
SETTLE_NS = 2_000_000_000  # a file older than this (system clock) is settled: covers 2 s timestamp granularity

RECALL_TOOL = "waac_recall"
RECALL_SPEC = ToolSpec(
    RECALL_TOOL,
    "Restore the full content of an earlier tool-result field that the context shows compacted as "
    '{"$pointer": REF, ...}. Fields marked {"$summary": ...} were shortened to the facts still needed; omitted '
    "fields are no longer needed. Returns the field's original content, exactly as it was first shown.",
    {"type": "object", "properties": {"ref": {"type": "string", "description": "The $pointer value"}},
     "required": ["ref"]})


# The recall result's own fields: read once, then released like any other observation.
RECALL_SCHEMA = ToolSchema(RECALL_TOOL, "recall", "recall", (
    FieldSpec("Status", "ResultStatus", Role.STATUS), FieldSpec("Message", "ResultMessage", Role.BODY_TEXT),
    FieldSpec("Ref", "ArtifactRef", Role.IDENTIFIER), FieldSpec("Version", "ArtifactVersion", Role.IDENTIFIER),
    FieldSpec("Sha256", "ArtifactChecksum", Role.IDENTIFIER), FieldSpec("Content", "RecalledContent", Role.BODY_TEXT)))


def checksum(data: str | bytes) -> str:
    return hashlib.sha256(stored_bytes(data) if isinstance(data, str) else data).hexdigest()


def stored_bytes(text: str) -> bytes:
    """A field's original text as the store keeps it: UTF-8, a lone surrogate (an undecodable file name a listing
    showed, a cut emoji) kept as its 3 bytes (surrogatepass), so a recall gives back exactly the text it had."""
    return text.encode("utf-8", "surrogatepass")


def ref_of(field_id: str, version: int) -> str:
    """A pointer's reference: the one place its format is written (the projection sizes pointers by it)."""
    return f"waac:{field_id}@v{version}"


@dataclass(frozen=True)
class Artifact:
    ref: str
    field_id: str
    identity: str
    version: int
    sha256: str  # of the original bytes when stored; the file is named by it
    file: str  # its path (the store's directory / sha256)


@dataclass(frozen=True)
class Source:
    """What the trajectory says about a pointed-to field now: its original text (None: no span to point into),
    identity and version. The recall tool checks the stored artifact against it."""

    original: str | None
    identity: str
    version: int


class ArtifactStore:
    def __init__(self, directory: str | Path | None = None) -> None:
        self._finalizer: Callable[[], object] | None = None
        if directory is None:
            self.dir = Path(tempfile.mkdtemp(prefix="waac-artifacts-", dir=scratch.folder(_ram_base())))
            self._finalizer = weakref.finalize(self, shutil.rmtree, self.dir, True)
        else:
            self.dir = Path(directory)
            self.dir.mkdir(parents=True, exist_ok=True)
        self._items: dict[str, Artifact] = {}
        self._signed: dict[str, Signature] = {}  # sha256 -> signature of its file when it last hashed right
        self._clock = 0  # the newest ctime observed in the store: a lower bound of the filesystem's clock
        self._dirname = str(self.dir)  # also touched for a fresh reading of the filesystem's clock (`_tick`)
        self._sources: dict[str, str] = {}  # ref -> the original text it last verified against
        self.recalls = 0
        self.failed_recalls = 0

    def close(self) -> None:
        """Remove a temporary store's files now (a given directory is left as it is)."""
        if self._finalizer is not None:
            self._finalizer()

    def path(self, ref: str) -> Path:
        return self.dir / self._items[ref].sha256

    def put(self, field_id: str, identity: str, version: int, original: str, sha256: str | None = None) -> Artifact:
        """Record a field's original bytes once. A later put of the same reference changes nothing: a file
        that went missing or changed is detected by `problem`, never silently rewritten. `sha256`: the caller's
        checksum(original), not computed again (a wrong one fails every check, so the field is shown whole)."""
        ref = ref_of(field_id, version)
        if ref not in self._items:
            data = stored_bytes(original)
            sha = sha256 or checksum(data)
            target = os.path.join(self._dirname, sha)
            self._items[ref] = Artifact(ref, field_id, identity, version, sha, target)
            if self._finalizer is not None:
                self._write_own(target, data)
            elif not os.path.exists(target):  # content-addressed: equal bytes share one file
                self._write_shared(target, sha, data)
        return self._items[ref]

    def _write_shared(self, target: str, sha: str, data: bytes) -> None:
        """A file of a shared directory, which other stores (other threads and processes) write too: through a
        temporary file of this writer's own (mkstemp: unique per call, not only per process, since the episodes of
        a threaded run write equal bytes at once; mode 0600, read by this user's runs), renamed whole over it."""
        fd, tmp = tempfile.mkstemp(prefix=f".{sha}.", suffix=".tmp", dir=self._dirname)
        try:
            _write(fd, data)
            os.replace(tmp, target)  # whole or absent, also for a reader of a shared directory
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._clock = max(self._clock, os.stat(target).st_ctime_ns)  # a reading of the filesystem's clock

    def _write_own(self, target: str, data: bytes) -> None:
        """A file of this store's own temporary directory, which no other store reads: written in place (one
        open, no rename; an existing file holds equal bytes or fails its check). A write that fails leaves no
        file behind; a half-written one could not pass the checksum anyway."""
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return
        try:
            self._clock = max(self._clock, _write(fd, data).st_ctime_ns)  # a reading of the filesystem's clock
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise

    def problem(self, ref: str, original: str | None, identity: str, version: int, full: bool = False) -> str | None:
        """Why the reference cannot be honoured, or None when it verifies (A.3: identity, version, checksum).
        `full`: re-read and re-hash the stored file even if its signature is unchanged (recall)."""
        a = self._items.get(ref)
        if a is None:
            return f"unknown reference {ref!r}"
        if original is None:
            return f"{ref}: the field has no located span in its message to verify against"
        if (a.identity, a.version) != (identity, version):
            return f"{ref}: identity/version {a.identity}@v{a.version} is not the field's {identity}@v{version}"
        why = self._file_problem(a, full)
        if why is not None:
            return f"{ref}: {why}"
        if self._sources.get(ref) != original:
            if checksum(original) != a.sha256:
                return f"{ref}: the artifact's checksum is not the one of the field's original text"
            self._sources[ref] = original
        return None

    def _file_problem(self, a: Artifact, full: bool) -> str | None:
        """The stored file's bytes must hash to the recorded checksum; skipped while its signature is the one
        recorded when it last did (stat before read: a change after the stat shows in the next signature)."""
        try:
            st = os.stat(a.file)
        except OSError:
            return f"the stored artifact {a.sha256[:16]} is missing"
        sig = signature(st)
        if not full and self._signed.get(a.sha256) == sig:
            self._clock = max(self._clock, st.st_ctime_ns)
            return None
        self._signed.pop(a.sha256, None)
        # else a fresh reading of the filesystem's clock (_tick), taken before the bytes are read below
        settled = (st.st_ctime_ns < self._clock or st.st_ctime_ns < time.time_ns() - SETTLE_NS
                   or st.st_ctime_ns < self._tick())
        self._clock = max(self._clock, st.st_ctime_ns)
        try:
            with open(a.file, "rb") as fh:  # (not pathlib: its path parsing cost more than the read)
                stored = fh.read()
        except OSError:
            return f"the stored artifact {a.sha256[:16]} is missing"
        if checksum(stored) != a.sha256:
            return "the stored artifact changed (checksum mismatch)"
        if settled:  # racily clean otherwise: a change in this clock tick would keep the signature
            self._signed[a.sha256] = sig
        return None

    def _tick(self) -> int:
        """Read the filesystem's clock now: touch the store's directory (its ctime becomes the current time, as
        any change to a file would give; putting a file changes its times anyway) and stat it. Returns the
        newest ctime observed. With fine timestamps (tmpfs or ext4 on a recent kernel: the issue-28 machine) the
        reading is past a file written a moment ago, so a new artifact is signed at its first check instead of
        re-read at every step while it is the newest; with coarse ones nothing changes."""
        try:
            os.stat(self._dirname)  # queried first: a multigrain filesystem then stamps the touch finely (Linux 6.13+)
            os.utime(self._dirname)
            self._clock = max(self._clock, os.stat(self._dirname).st_ctime_ns)
        except OSError:  # no reading (the directory gone or not ours): the file stays unsettled
            pass
        return self._clock

    def verify(self, ref: str, original: str | None, identity: str, version: int) -> bool:
        return self.problem(ref, original, identity, version) is None

    def recall(self, call: ToolCall, source: Callable[[str], Source | None]) -> tuple[str, bool]:
        """The recall tool: (content, is_error). Verified as at projection; `source(field_id)` gives the
        trajectory's side. Content is the original bytes: spliced in verbatim when they are a JSON value (the
        result then contains them literally), else as a JSON string (decoding gives them back exactly)."""
        self.recalls += 1
        try:
            ref = str(call.parsed_arguments().get("ref", ""))
        except ValueError as exc:
            return self._fail(f"{RECALL_TOOL}: arguments are not a JSON object ({exc})")
        a = self._items.get(ref)
        src = source(a.field_id) if a is not None else None
        why = (self.problem(ref, src.original, src.identity, src.version, full=True) if src
               else f"unknown reference {ref!r}")
        if why is not None:
            return self._fail(f"{RECALL_TOOL}: {why}; the field is shown in full instead")
        assert a is not None
        text = (self.dir / a.sha256).read_bytes().decode("utf-8", "surrogatepass")
        head = json.dumps({"Status": "Success", "Ref": ref, "Version": a.version, "Sha256": a.sha256})
        return f"{head[:-1]}, \"Content\": {text if _is_json(text) else json.dumps(text, ensure_ascii=False)}}}", False

    def _fail(self, message: str) -> tuple[str, bool]:
        self.failed_recalls += 1
        return json.dumps({"Status": "Error", "Message": message}), True


def _write(fd: int, data: bytes) -> os.stat_result:
    """Write all of data to the open file fd and close it; returns its stat after the last write."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return os.fstat(fd)
    finally:
        os.close(fd)


def _ram_base() -> str | None:
    """SCRATCH when it is a writable directory with SCRATCH_FREE bytes free and $TMPDIR does not name another
    place, else None (the system's default temporary directory). Checked for every store (a statvfs): many
    episodes in flight can fill a small /dev/shm, and the stores made after that go to disk."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        st = os.statvfs(SCRATCH)
    except OSError:
        return None
    usable = os.path.isdir(SCRATCH) and os.access(SCRATCH, os.W_OK | os.X_OK)
    return SCRATCH if usable and st.f_bavail * st.f_frsize >= SCRATCH_FREE else None


def _is_json(text: str) -> bool:
    """One JSON value with no surrounding whitespace (so splicing it keeps the envelope valid and exact)."""
    if not text or text != text.strip():
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # (nested deeper than the parser goes: spliced as a JSON string)
        return False
    return True
