"""A tour of warden-sandbox: make a sandbox, run commands in it (whole,
streamed, in the background), take a command up again, read its events.

Start the daemon first (`warden serve`); this finds it on its socket in
warden's state directory, or through WARDEN_HOST / WARDEN_TOKEN.
"""

from __future__ import annotations

import sys

from warden_sandbox import Sandbox, WardenError


def main() -> int:
    try:
        sb = Sandbox.create(timeout=300, labels={"example": "quickstart"})
    except WardenError as e:
        print(f"cannot create a sandbox: {e}", file=sys.stderr)
        return 1
    with sb:
        print(f"sandbox {sb.id} is {sb.info().state}")

        r = sb.commands.run("uname -a; id; ls -la /workspace")
        print(f"exit {r.exit_code}:\n{r.stdout}")

        r = sb.commands.run(["sh", "-c", "echo oops >&2; exit 3"])
        print(f"a failure is a result: exit {r.exit_code}, stderr {r.stderr!r}")

        print("streaming:")
        sb.commands.run(
            "for i in 1 2 3; do echo tick $i; sleep 0.5; done",
            on_stdout=lambda text: print("  out:", text, end=""),
        )

        h = sb.commands.run("read name; echo hello $name", background=True)
        h.send_stdin("agent\n")
        h.close_stdin()
        print("background:", h.wait().stdout, end="")
        print("taken up again:", sb.commands.connect(h.id).wait().stdout, end="")

        print("events:", ", ".join(e["event"] for e in sb.events(follow=False)))
    print(f"sandbox {sb.id} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
