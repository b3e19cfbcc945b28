import sys

try:
    from facts.process_exit import exit_now
    from launcher.entry_points import main
except ModuleNotFoundError as exc:  # a bare `python` outside the project's venv: one line, not a traceback
    if exc.name is None or exc.name.partition(".")[0] in ("evidence", "facts", "launcher", "trainer"):
        raise
    print(f"python -m launcher: error: {exc.name} is not installed for {sys.executable}; run .venv/bin/python -m "
          "launcher ... (make venv creates it) or source .venv/bin/activate first", file=sys.stderr)
    sys.exit(2)

exit_now(main())  # a normal exit, less the interpreter's teardown (facts/process_exit.py)
