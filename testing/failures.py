"""Prints each failed test of the last nextest run and why it failed: its panic
message and what was printed after its backtrace (a fixture's log), read from
nextest's JUnit report (argv[1]). `./x test` runs it after a failed run, so that the
reasons end the output: CI shows an output's start and end, not its middle."""

import re
import sys
import xml.etree.ElementTree as ET

MAX_LINES = 30
MAX_CHARS = 1000


BACKTRACE = re.compile(r"^\s*(\d+: |at |note: Some details|stack backtrace:)")


def reason(text):
    """The panic message, then what was printed after the backtrace (a fixture's log
    printed while unwinding), each at most MAX_LINES lines."""
    lines = (text or "").splitlines()
    start = next((i for i, l in enumerate(lines) if "panicked at" in l), None)
    if start is None:
        return lines[-MAX_LINES:]
    out, after, in_backtrace = [], [], False
    for line in lines[start:]:
        if BACKTRACE.match(line):
            in_backtrace = True
        elif not in_backtrace:
            out.append(line)
        else:
            after.append(line)
    return [clip(l) for l in out[:MAX_LINES] + after[-MAX_LINES:] if l.strip()]


def clip(line):
    """A line cut to MAX_CHARS: an assertion may print a whole object on one line."""
    if len(line) <= MAX_CHARS:
        return line
    return f"{line[:MAX_CHARS]}... ({len(line) - MAX_CHARS} more characters)"


def main():
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"(no JUnit report to read the failures from: {e})")
        return
    for case in root.iter("testcase"):
        failures = case.findall("failure") + case.findall("error")
        if not failures:
            continue
        print(f"FAILED {case.get('classname')} {case.get('name')}")
        text = case.findtext("system-err") or ""
        if "panicked at" not in text:
            text += "\n" + (case.findtext("system-out") or failures[0].get("message") or "")
        for line in reason(text):
            print(f"    {line}")


main()
