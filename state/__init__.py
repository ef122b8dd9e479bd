"""The state file: model, format migrations, backends and locking (design §3.2, the lowest layer).

Imports nothing of gpuplan but :mod:`gpuplan.errors`. The modules, bottom up:

- :mod:`~gpuplan.state.credentials`: the rule that keeps credentials out of the state, and Secret redaction.
- :mod:`~gpuplan.state.model`: ``StateFile`` (format 2), ``ResourceRecord``, ``Generation``, ``JournalEntry``,
  ``to_json`` (the one deterministic serialisation), ``make_address`` (design §3.3).
- :mod:`~gpuplan.state.migrations`: older formats upgraded step by step on read (``_v1_to_v2``, ...).
- :mod:`~gpuplan.state.document`: bytes -> ``StateFile`` with located errors and hints.
- :mod:`~gpuplan.state.lock`: the flock-based lock with a holder record (``LockInfo``).
- :mod:`~gpuplan.state.backend`: the ``StateBackend`` contract, its write rules, ``MemoryBackend``.
- :mod:`~gpuplan.state.local`: ``LocalFileBackend`` and ``default_state_path`` / ``resolve_state_path``.

A run uses it like this::

    backend = LocalFileBackend(resolve_state_path(state_option, spec_path))
    with backend.locked("apply") as lock:          # StateLockedError names the holder
        state = backend.read() or StateFile.new()
        state = state.with_record(record).next_serial()
        backend.write(state)                        # atomic, backup kept, serial/lineage checked
"""
