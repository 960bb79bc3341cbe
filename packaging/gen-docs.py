#!/usr/bin/env python3
"""Generates the manual page and the bash completion of glucose-gateway from the program's own --help
texts, so neither can drift from the command line:

    gen-docs.py man BINARY VERSION DATE > glucose-gateway.1
    gen-docs.py completion BINARY > glucose-gateway.bash
    gen-docs.py commands BINARY            the command names, one a line

The top-level --help lists the commands under "Commands:"; each command's --help starts with its
usage line(s), then paragraphs, indented option lists ("  --name VALUE   text") and indented blocks."""
import re
import subprocess
import sys

PROGRAM = "glucose-gateway"


def run_help(binary, *command):
    result = subprocess.run([binary, *command, "--help"], capture_output=True, text=True, timeout=30,
                            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    if result.returncode != 0:
        sys.exit(f"gen-docs: {binary} {' '.join(command)} --help exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout.rstrip("\n") + "\n"


def commands_of(top_help):
    """[(name, abstract)] from the "Commands:" section of the top-level help."""
    lines = top_help.splitlines()
    try:
        start = lines.index("Commands:") + 1
    except ValueError:
        sys.exit("gen-docs: the top-level --help has no 'Commands:' section")
    out = []
    for line in lines[start:]:
        m = re.match(r"^  ([a-z][a-z0-9-]*)\s+(\S.*)$", line)
        if not m:
            break
        out.append((m.group(1), m.group(2)))
    if not out:
        sys.exit("gen-docs: no commands listed under 'Commands:'")
    return out


def split_usage(text):
    """(usage lines without the 'usage: ' prefix, the rest of the lines)."""
    lines = text.splitlines()
    usage = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if i == 0 and line.startswith("usage: "):
            usage.append(line[len("usage: "):])
        elif usage and line.startswith("       ") and line.strip().startswith(PROGRAM):
            usage.append(line.strip())
        else:
            break
        i += 1
    if not usage:
        sys.exit(f"gen-docs: help text does not start with 'usage: ': {lines[:1]}")
    return usage, lines[i:]


# ------------------------------------------------------------------------------------------ roff

def esc(text):
    """Escapes text for roff: backslashes, minus signs (so options copy as ASCII '-'), and a leading
    control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


DEFINITION = re.compile(r"^(  +)(\S(?:.*?\S)?)(\s{2,})(\S.*)$")


def definition_list(block):
    """Parses an indented block as [(term, [description lines])] when every line is either a term line
    ("  TERM   text") or a continuation indented to the text column of the item above; else None."""
    items = []
    column = None
    for line in block:
        m = DEFINITION.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if items and column is not None and indent == column:
            items[-1][1].append(line.strip())
        elif m and len(m.group(1)) == len(block[0]) - len(block[0].lstrip(" ")):
            column = len(m.group(1)) + len(m.group(2)) + len(m.group(3))
            items.append((m.group(2), [m.group(4)]))
        else:
            return None
    return items


def body_to_roff(lines):
    out = []
    paragraph = []

    def flush():
        if paragraph:
            out.append(".PP")
            out.extend(esc(l) for l in paragraph)
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
            continue
        if line.startswith(" "):
            flush()
            block = []
            while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
                block.append(lines[i])
                i += 1
            items = definition_list(block)
            if items is not None:
                for term, text in items:
                    out.append(".TP")
                    out.append("\\fB" + esc(term) + "\\fR")
                    out.extend(esc(t) for t in text)
            else:
                out.append(".RS 2")
                out.append(".nf")
                out.extend(esc(l[2:] if l.startswith("  ") else l) for l in block)
                out.append(".fi")
                out.append(".RE")
            continue
        if line.endswith(":") and len(line) < 60:
            flush()
            out.append(".PP")
            out.append("\\fB" + esc(line) + "\\fR")
            i += 1
            continue
        paragraph.append(line)
        i += 1
    flush()
    return out


def synopsis(usage_lines):
    out = [".PP"]
    for u in usage_lines:
        words = u.split(" ", 1)
        out.append(".br" if len(out) > 1 else ".nf")
        out.append("\\fB" + esc(words[0]) + "\\fR" + (" " + esc(words[1]) if len(words) > 1 else ""))
    out.append(".fi")
    return out


def man_page(binary, version, date):
    top = run_help(binary)
    usage, rest = split_usage(top)
    commands = commands_of(top)
    out = [
        f'.TH GLUCOSE\\-GATEWAY 1 "{esc(date)}" "glucose\\-gateway {esc(version)}" "User Commands"',
        ".\\\" Generated by packaging/gen-docs.py from the program's --help texts; do not edit.",
        ".nh",
        ".ad l",
        ".SH NAME",
        "glucose\\-gateway \\- Bluetooth LE blood\\-glucose meter gateway",
        ".SH SYNOPSIS",
        *synopsis(usage),
    ]
    # The top-level help: its description, options and exit status (the command list becomes COMMANDS).
    try:
        cut = rest.index("Commands:")
    except ValueError:
        sys.exit("gen-docs: no 'Commands:' line")
    after = rest[cut + 1 + len(commands):]
    out += [".SH DESCRIPTION", *body_to_roff(rest[:cut])]
    out += [".SH COMMANDS",
            ".PP",
            "Every command prints the text of its subsection below with \\fBglucose\\-gateway\\fR "
            "\\fIcommand\\fR \\fB\\-\\-help\\fR."]
    for name, abstract in commands:
        text = run_help(binary, name)
        cmd_usage, cmd_rest = split_usage(text)
        out += [".SS " + esc(name), ".PP", esc(abstract) + ".", *synopsis(cmd_usage), *body_to_roff(cmd_rest)]
    out += [".SH EXIT STATUS", *body_to_roff(after)]
    out += [
        ".SH FILES",
        ".TP", "\\fI/etc/glucose\\-gateway/glucose\\-gateway.toml\\fR",
        "The configuration file (every key documented in it; check it with \\fBglucose\\-gateway config check\\fR).",
        ".TP", "\\fI/var/lib/glucose\\-gateway/\\fR",
        "The readings database of the service user \\fBglucose\\-gateway\\fR (mode 0700).",
        ".TP", "\\fI/usr/lib/systemd/system/glucose\\-gateway.service\\fR",
        "The systemd unit that runs \\fBglucose\\-gateway run\\fR.",
        ".SH ENVIRONMENT",
        ".TP", "\\fBGLUCOSE_GATEWAY_CONFIG\\fR",
        "The config file when \\fB\\-\\-config\\fR is not given.",
        ".TP", "\\fBDBUS_SYSTEM_BUS_ADDRESS\\fR",
        "The D\\-Bus system bus to reach BlueZ on.",
        ".SH SEE ALSO",
        "\\fBsystemctl\\fR(1), \\fBjournalctl\\fR(1), \\fBbluetoothctl\\fR(1),",
        "\\fI/usr/share/doc/glucose\\-gateway/README.md.gz\\fR",
    ]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------- completion

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?:[ =]([A-Za-z][A-Za-z0-9/|:._-]*(?:\.\.\.)?))?")


def options_of(text):
    """{option: value placeholder or None} from a help text: its usage lines and the indented lines that
    list options (a term line "  --name VALUE   text" gives its term; a line of several options, such as
    "  --records N   --start TIME", gives all of them). Options mentioned in prose are not taken: they
    belong to other commands. A value placeholder is the word after the option when it is written in
    capitals or as hciN, Area/City, a|b."""
    usage, rest = split_usage(text)
    if "Commands:" in rest:
        rest = rest[:rest.index("Commands:")]
    sources = list(usage)
    for line in rest:
        if not line.startswith(" "):
            continue
        stripped = re.sub(r"^[A-Z][A-Za-z ]*:\s+", "", line.strip())
        if not stripped.startswith("--"):
            continue
        m = DEFINITION.match("  " + stripped)
        if m and not m.group(4).startswith("--"):
            sources.append(m.group(2))
        else:
            sources.append(stripped)
    found = {}
    for line in sources:
        for m in OPTION.finditer(line):
            option, value = m.group(1), m.group(2)
            takes = value is not None and (value[0].isupper() or value == "hciN" or "|" in value or "/" in value)
            if takes:
                found[option] = value
            else:
                found.setdefault(option, None)
    return found


def shell_words(words):
    return " ".join(sorted(words))


def completion(binary):
    top = run_help(binary)
    commands = [name for name, _ in commands_of(top)]
    global_options = options_of(top)
    lines = [
        "# bash completion for glucose-gateway",
        "# Generated by packaging/gen-docs.py from the program's --help texts; do not edit.",
        "",
        "_glucose_gateway()",
        "{",
        "    local cur prev words cword",
        "    _init_completion || return",
        "",
        "    local commands='" + shell_words(commands) + "'",
        "    local global_options='" + shell_words(global_options) + "'",
        "    local i command=''",
        "    for ((i = 1; i < cword; i++)); do",
        "        case ${words[i]} in",
        "            --config) ((i++)) ;;",
        "            -*) ;;",
        "            *) command=${words[i]}; break ;;",
        "        esac",
        "    done",
        "",
        "    case $prev in",
        "        --config|--meter|--state) _filedir; return ;;",
        "        --adapter) COMPREPLY=($(compgen -W \"$(command ls /sys/class/bluetooth 2>/dev/null | grep -v :)\" -- \"$cur\")); return ;;",
        "        --timezone) COMPREPLY=($(compgen -W \"$(cd /usr/share/zoneinfo 2>/dev/null && find . -type f -name '[A-Z]*' | sed 's|^\\./||' | grep / | grep -v '^posix/\\|^right/')\" -- \"$cur\")); return ;;",
    ]
    value_options = set()
    per_command = {}
    for name in commands:
        opts = options_of(run_help(binary, name))
        per_command[name] = opts
        value_options |= {o for o, v in opts.items() if v is not None and o not in ("--config", "--meter", "--state", "--adapter", "--timezone")}
    if value_options:
        lines.append("        " + "|".join(sorted(value_options)) + ") return ;;")
    lines += [
        "    esac",
        "",
        "    if [[ -z $command ]]; then",
        "        if [[ $cur == -* ]]; then",
        "            COMPREPLY=($(compgen -W \"$global_options\" -- \"$cur\"))",
        "        else",
        "            COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\"))",
        "        fi",
        "        return",
        "    fi",
        "",
        "    case $command in",
    ]
    for name in commands:
        opts = shell_words(o for o in per_command[name] if o != "--help")
        lines.append(f"        {name})")
        if name == "decode":
            lines += ["            if [[ $cur != -* && $prev == decode ]]; then",
                      "                COMPREPLY=($(compgen -W '2a18 2a34 2a51 2a52' -- \"$cur\")); return",
                      "            fi"]
        if name == "config":
            lines += ["            if [[ $prev == config ]]; then",
                      "                COMPREPLY=($(compgen -W 'check' -- \"$cur\")); return",
                      "            fi",
                      "            [[ $prev == check && $cur != -* ]] && { _filedir; return; }"]
        lines.append(f"            COMPREPLY=($(compgen -W '{opts} --help' -- \"$cur\")) ;;")
    lines += [
        "    esac",
        "} &&",
        "    complete -F _glucose_gateway glucose-gateway",
        "",
        "# ex: filetype=sh",
    ]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) >= 3 and argv[1] == "man":
        version = argv[3] if len(argv) > 3 else "unknown"
        date = argv[4] if len(argv) > 4 else "1970-01-01"
        sys.stdout.write(man_page(argv[2], version, date))
    elif len(argv) == 3 and argv[1] == "completion":
        sys.stdout.write(completion(argv[2]))
    elif len(argv) == 3 and argv[1] == "commands":
        sys.stdout.write("".join(name + "\n" for name, _ in commands_of(run_help(argv[2]))))
    else:
        sys.stderr.write(__doc__)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
