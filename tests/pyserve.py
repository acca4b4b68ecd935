"""One python3 for a shell suite's small checks (tests/lib.sh: py, jget, close).

A python3 start with numpy and h5py costs 0.2-0.4 s on the test machines and
the suites make hundreds of such calls; this process is started once per
suite and runs each script as `python3 -c SRC ARGS` or `python3 - ARGS`
would: in a fresh __main__ namespace, in the caller's directory, with
sys.argv, stdout and stderr (files the caller names) and the exit status of
SystemExit or an uncaught exception (its traceback on stderr, status 1).

Requests arrive on stdin as NUL-terminated fields: their count, then the
caller's directory, its stdout and stderr paths, and python3's arguments
(-c SRC ARGS | - ARGS | FILE ARGS); for "-" the caller has written the
script to the stdout path + ".src". Each is answered with its exit status on
a line of stdout. Not for scripts that read data from stdin (theirs is
/dev/null here) or for calls from background jobs (one request at a time).
"""
import gc
import os
import runpy
import sys
import traceback

try:  # the suites' scripts import these; loaded once here
    import numpy
    import h5py  # noqa: F401
except ImportError:
    numpy = None

REAL_STDIN, REAL_STDOUT, REAL_STDERR = sys.stdin, sys.stdout, sys.stderr
PRINT_OPTIONS = numpy.get_printoptions() if numpy is not None else None


def exit_status(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def run(args, out_path):
    if args[0] == "-c":
        sys.argv = ["-c"] + args[2:]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    elif args[0] == "-":
        with open(out_path + ".src") as f:
            src = f.read()
        sys.argv = ["-"] + args[1:]
        exec(compile(src, "<stdin>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


def requests(fd):
    """Each request's fields, decoded as python3 decodes its argv."""
    buf = b""
    fields = []
    while True:
        while b"\0" not in buf:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buf += chunk
        field, buf = buf.split(b"\0", 1)
        fields.append(os.fsdecode(field))
        if len(fields) == int(fields[0]) + 1:
            yield fields[1:]
            fields = []


def serve():
    for cwd, out_path, err_path, *args in requests(REAL_STDIN.fileno()):
        rc = 0
        with open(out_path, "w") as out, open(err_path, "w") as err, open(os.devnull) as null:
            sys.stdout, sys.stderr, sys.stdin = out, err, null
            try:
                os.chdir(cwd)
                run(args, out_path)
            except SystemExit as e:
                rc = exit_status(e)
            except BaseException:
                traceback.print_exc()
                rc = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                sys.stdout, sys.stderr, sys.stdin = REAL_STDOUT, REAL_STDERR, REAL_STDIN
                sys.last_type = sys.last_value = sys.last_traceback = None
                if PRINT_OPTIONS is not None:
                    numpy.set_printoptions(**PRINT_OPTIONS)
        gc.collect()  # closes what a script left open (h5py files) before its caller goes on
        os.write(REAL_STDOUT.fileno(), b"%d\n" % rc)


if __name__ == "__main__":
    serve()
