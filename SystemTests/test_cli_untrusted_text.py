"""Text from outside never reaches a terminal raw: a meter's name and Device Information strings, and a
server's error body, carry ESC, BEL, CR/LF and NUL; `pair`, `meters`, `status`, `sync` and the log show
them escaped (one line stays one line, a table keeps its rows), and JSON output escapes them as JSON does.
Device Information strings lose their control characters before they are stored (the bytes as sent are
kept beside them), so those show cleaned; the advertised name is shown escaped."""
import http.server
import json
import threading

import pytest

from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"
# D-Bus strings cannot carry NUL (the name travels as one); GATT values (Device Information) can.
NAME = "evil\x1b[31m\x07\r\nINJECTED LINE"
DIS = {"manufacturer": "Acme\x1b]0;owned\x07", "model": "Model\r\nINJECTED LINE",
       "serial": "SER\x00IAL\x1b[2J", "firmware": "1.0\n\x08"}
CLEANED = {"manufacturer": "Acme]0;owned", "model": "ModelINJECTED LINE", "serial": "SERIAL[2J", "firmware": "1.0"}
CONTROL = {chr(c) for c in range(0x20)} | {"\x7f"} | {chr(c) for c in range(0x80, 0xa0)}


def assert_no_control(text, lines=None):
    """No control character but the line ends; `lines`: how many lines there must be."""
    body = text[:-1] if text.endswith("\n") else text
    bad = sorted({repr(c) for c in body if c in CONTROL and c != "\n"})
    assert not bad, "raw control characters %s in %r" % (bad, text)
    assert "\nINJECTED LINE" not in text
    if lines is not None:
        assert len(text.splitlines()) == lines, text


def evil_meter():
    m = meter(name=NAME)
    m["deviceInformation"] = dict(DIS)
    return m


def test_meter_strings_are_escaped_in_every_text_output(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(evil_meter()))
    gw = Gateway(private_bus, tmp_path)

    scan = gw.run("scan", "--timeout", "1")
    assert scan.returncode == 0, scan.stderr
    assert_no_control(scan.stdout, lines=2)
    assert "evil\\e[31m\\a\\r\\nINJECTED LINE" in scan.stdout

    pair = gw.run("--verbose", "pair", ADDRESS, "--pin", "123456", "--wait", "10")
    assert pair.returncode == 0, pair.stderr
    assert_no_control(pair.stdout, lines=1)
    assert "Acme]0;owned ModelINJECTED LINE" in pair.stdout
    assert "SERIAL[2J" in pair.stdout
    # The log lines (stderr, --verbose) are escaped too.
    for line in pair.stderr.splitlines(keepends=True):
        assert_no_control(line, lines=1)

    table = gw.run("meters")
    assert table.returncode == 0, table.stderr
    # A header and one row: the injected line break does not add a row.
    assert_no_control(table.stdout, lines=2)
    assert "ModelINJECTED LINE" in table.stdout
    assert "identity-strings-cleaned" in table.stdout
    assert table.stdout.splitlines()[1].startswith(ADDRESS)

    listing = gw.run("meters", "--all")
    assert_no_control(listing.stdout, lines=2)

    status = gw.run("status")
    assert status.returncode == 0, status.stderr
    assert_no_control(status.stdout)
    line = next(l for l in status.stdout.splitlines() if l.startswith("meter " + ADDRESS))
    assert "evil\\e[31m\\a\\r\\nINJECTED LINE" in line

    sync = gw.run("--verbose", "sync")
    assert sync.returncode == 0, sync.stderr
    assert_no_control(sync.stdout)
    for line in sync.stderr.splitlines(keepends=True):
        assert_no_control(line, lines=1)

    # JSON keeps the exact strings, escaped as JSON escapes them.
    raw = gw.run("meters", "--json").stdout
    assert "\\u001b" in raw and "\\r\\n" in raw
    assert_no_control(raw.replace("\n", ""))
    got = json.loads(raw)[0]
    assert got["name"] == NAME
    for key in ("manufacturer", "model", "serial", "firmware"):
        assert got[key] == CLEANED[key]
    assert got["handling"] == ["identity-strings-cleaned"]
    status_json = json.loads(gw.run("status", "--json").stdout)
    assert status_json["meters"][0]["name"] == NAME


class EvilServer(http.server.ThreadingHTTPServer):
    """A server that refuses every upload with an error body full of control characters."""
    body = b"\x1b[2J\x07refused\r\nINJECTED LINE\x00"


class EvilHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status":200,"message":{"canRead":true,"canWrite":true,"isAdmin":true}}')

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(400)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)


@pytest.fixture
def evil_server():
    server = EvilServer(("127.0.0.1", 0), EvilHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_servers_error_body_is_escaped(private_bus, standin, meter_file, tmp_path, evil_server):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path,
                 extra_config='[nightscout]\nurl = "%s"\napi_secret = "0123456789abcdef"\n' % evil_server)
    gw.pair(ADDRESS)
    sync = gw.run("--verbose", "sync")
    assert sync.returncode == 75, sync.stdout + sync.stderr
    assert_no_control(sync.stdout)
    assert "refused" in sync.stdout
    for line in sync.stderr.splitlines(keepends=True):
        assert_no_control(line, lines=1)

    upload = gw.run("upload")
    assert_no_control(upload.stdout)
    for line in upload.stderr.splitlines(keepends=True):
        assert_no_control(line, lines=1)

    status = gw.run("status")
    assert status.returncode == 0, status.stderr
    assert_no_control(status.stdout)
    error_line = next(l for l in status.stdout.splitlines() if l.startswith("  last error 400"))
    assert "refused" in error_line
    message = json.loads(gw.run("status", "--json").stdout)["destinations"][0]["last_error"]["message"]
    assert "refused" in message

