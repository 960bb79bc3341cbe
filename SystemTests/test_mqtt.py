"""Home Assistant over MQTT: `glucose-gateway run` with an [mqtt] section against a real mosquitto from
Debian on loopback, read back with mosquitto_sub. Discovery configs and states, reading events (only the
uploadable readings) also across a broker outage, the last will when the gateway is killed, and bad
config and the broker password never shown.

The broker and every subscriber are started here and stopped by pid."""
import getpass
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gg_bus import gateway_binary, stop_process
from gg_daemon import Gateway, control, gateways, wait_until  # noqa: F401 (fixtures)

A = "C0:26:DA:01:02:03"
METER_ID = "c026da010203"
PIN = "123456"
PREFIX = "gg"
PASSWORD = "broker-pass-81723"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mosquitto:
    """mosquitto on 127.0.0.1:port with a password file; no persistence, so a restart loses retained messages."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.port = free_port()
        passwords = self.directory / "passwords"
        subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwords), "gw", PASSWORD], check=True, capture_output=True)
        self.conf = self.directory / "mosquitto.conf"
        # `user`: run as root, mosquitto would switch to its own user, which cannot read this directory.
        self.conf.write_text("listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\npersistence false\nuser %s\n"
                             % (self.port, passwords, getpass.getuser()))
        self.process = None
        self.subscribers = []
        self.start()

    def start(self):
        self.process = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                        stderr=open(self.directory / "mosquitto.log", "a"))
        wait_until("mosquitto listening", self.accepts, timeout=10)

    def accepts(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self):
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def sub_args(self, *topics):
        args = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(self.port), "-u", "gw", "-P", PASSWORD, "-q", "1",
                "-F", "%t\t%r\t%p"]
        for t in topics:
            args += ["-t", t]
        return args

    def retained(self, *topics, seconds=2):
        """The retained messages on `topics` now: {topic: payload}."""
        out = subprocess.run(self.sub_args(*topics) + ["--retained-only", "-W", str(seconds)], capture_output=True, text=True,
                             timeout=seconds + 10)
        found = {}
        for line in out.stdout.splitlines():
            topic, retained, payload = line.split("\t", 2)
            found[topic] = payload
        return found

    def subscribe(self, *topics):
        """A live subscriber, subscribed when returned; its messages from `.stop()`."""
        sub = Subscriber(self.sub_args(*topics) + ["-d"])
        self.subscribers.append(sub)
        return sub

    def close(self):
        """End of the test: the broker and any subscriber a failed test left running."""
        for sub in self.subscribers:
            if sub.process.poll() is None:
                stop_process(sub.process)
        self.stop()


class Subscriber:
    """A live mosquitto_sub (line-buffered), subscribed when constructed; a reader thread collects its lines."""

    def __init__(self, args):
        self.process = subprocess.Popen(["stdbuf", "-oL"] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.messages = []
        self.lock = threading.Lock()
        subscribed = threading.Event()

        def read():
            for line in self.process.stdout:
                if "SUBACK" in line:
                    subscribed.set()
                parts = line.rstrip("\n").split("\t", 2)
                if len(parts) == 3 and parts[1] in ("0", "1"):
                    with self.lock:
                        self.messages.append((parts[0], parts[1] == "1", parts[2]))
            subscribed.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not subscribed.wait(10) or self.process.poll() is not None:
            raise AssertionError("mosquitto_sub did not subscribe")

    def stop(self, expect=0, timeout=20):
        """Waits (bounded) until `expect` messages came (the broker forwards after it acknowledged the
        publisher), then stops the subscriber and returns every message it received."""
        if expect:
            wait_until("%d message(s) at the subscriber" % expect, lambda: len(self.messages) >= expect, timeout=timeout)
        stop_process(self.process)
        self.reader.join(timeout=10)
        with self.lock:
            return list(self.messages)


@pytest.fixture
def broker(tmp_path):
    b = Mosquitto(tmp_path)
    yield b
    b.close()


def meter(count=5):
    records = [{"sequence": 1 + i, "time": "2024-03-05T06:%02d:00" % i, "timeOffset": 0, "mgdl": 90 + i} for i in range(count)]
    records.append({"sequence": count + 1, "time": "2024-03-05T07:00:00", "timeOffset": 0, "mgdl": 130, "type": 10, "location": 4})
    records.append({"sequence": count + 2, "time": "2024-03-05T07:05:00", "timeOffset": 0, "mgdl": 121, "status": ["batteryLow"]})
    return {"address": A, "name": "meter+0203", "pin": PIN, "bonding": True, "records": records, "advertising": "off",
            "features": ["lowBattery", "highLow", "generalFault"]}


class Gate:
    """A TCP forwarder on its own port to the broker, for an outage the test controls: `close()` drops every
    forwarded connection and refuses new ones, `open()` listens again on the same port. With it a subscriber
    can be in place on a restarted broker before the gateway can reach it."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.port = free_port()
        self.listener = None
        self.links = []
        self.lock = threading.Lock()
        self.open()

    def open(self):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(8)
        self.listener = listener
        threading.Thread(target=self.accept, args=(listener,), daemon=True).start()

    def accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.links += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        with self.lock:
            links, self.links = self.links, []
        for s in links:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def mqtt_gateway(tmp_path, bus, broker, gateways, password=PASSWORD, port=None):
    secret = tmp_path / "mqtt.password"
    secret.write_text(password + "\n")
    os.chmod(secret, 0o600)
    extra = ('[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nusername = "gw"\npassword_file = "%s"\ntopic_prefix = "%s"\n'
             '[network]\nretry_count = 1\nnetwork_timeout_ms = 1000\n' % (port or broker.port, secret, PREFIX))
    gw = Gateway(tmp_path, bus, extra_config=extra, args=("--quiet-after", "0.3", "--time-scale", "60"))
    gateways.append(gw)
    control(bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    return gw


def uploadable(gw):
    return [r[0] for r in gw.query("SELECT sequence FROM reading WHERE exclusion IS NULL ORDER BY sequence")]


def event_sequences(messages):
    return sorted(json.loads(p)["sequence"] for (t, r, p) in messages if t == "%s/%s/reading" % (PREFIX, METER_ID))


def mqtt_destination(gw):
    return next(d for d in gw.status()["destinations"] if d["name"] == "mqtt")


def test_discovery_states_and_reading_events(private_bus, standin, meter_file, tmp_path, gateways, broker):
    standin("--time-scale", "20", "--meter", meter_file(meter()))
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways)
    events = broker.subscribe(PREFIX + "/+/reading")
    gw.start()
    wait_until("online", lambda: broker.retained(PREFIX + "/status").get(PREFIX + "/status") == "online", timeout=20)
    # Loaded at run time because [mqtt] is set (the binary does not link it: see the package test).
    assert "libmosquitto.so" in Path("/proc/%d/maps" % gw.process.pid).read_text()
    control(private_bus, "Advertise", A, 20.0)
    wait_until("downloaded", lambda: len(gw.sequences(A)) == 7, timeout=30)
    # The control-solution reading (6) is stored but never published.
    assert uploadable(gw) == [1, 2, 3, 4, 5, 7]
    wait_until("acknowledged", lambda: mqtt_destination(gw)["uploaded"] == 6, timeout=20)
    got = events.stop(expect=6)
    assert event_sequences(got) == [1, 2, 3, 4, 5, 7]
    assert all(not retained for (_, retained, _) in got)
    first = next(json.loads(p) for (_, _, p) in got if json.loads(p)["sequence"] == 1)
    assert first["mg_dl"] == 90 and first["mmol_l"] == 5.0 and first["time"] == "2024-03-05T06:00:00.000+00:00"
    assert first["meter"] == METER_ID and len(first["identifier"]) == 36

    def states():
        s = broker.retained("homeassistant/#", PREFIX + "/#")
        return s if s.get("%s/%s/glucose_mgdl" % (PREFIX, METER_ID)) == "121" and s.get(PREFIX + "/gateway/pending") == "0" else None
    s = wait_until("states", states, timeout=20)
    assert s["%s/%s/glucose_mmol" % (PREFIX, METER_ID)] == "6.7"
    assert s["%s/%s/glucose_time" % (PREFIX, METER_ID)] == "2024-03-05T07:05:00.000+00:00"
    assert s["%s/%s/battery_low" % (PREFIX, METER_ID)] == "ON"
    assert s[PREFIX + "/gateway/network_state"] == "0"
    config = json.loads(s["homeassistant/sensor/%s/glucose_mgdl/config" % METER_ID])
    assert config["device_class"] == "blood_glucose_concentration" and config["unit_of_measurement"] == "mg/dL"
    assert config["state_topic"] == "%s/%s/glucose_mgdl" % (PREFIX, METER_ID)
    assert config["availability_topic"] == PREFIX + "/status"
    assert config["device"]["identifiers"] == ["glucose_gateway_" + METER_ID]
    for key in ("glucose_mmol", "glucose_time", "glucose_result"):
        assert "homeassistant/sensor/%s/%s/config" % (METER_ID, key) in s
    # The gateway-wide sensors once, on the gateway's device, which each meter's device names as via_device.
    for key in ("pending", "network_state"):
        gateway_config = json.loads(s["homeassistant/sensor/%s/%s/config" % (PREFIX, key)])
        assert gateway_config["device"]["identifiers"] == ["glucose_gateway_" + PREFIX]
        assert "homeassistant/sensor/%s/%s/config" % (METER_ID, key) not in s
    assert config["device"]["via_device"] == "glucose_gateway_" + PREFIX
    assert json.loads(s["homeassistant/binary_sensor/%s/battery_low/config" % METER_ID])["device_class"] == "battery"
    status = gw.status()
    assert any(d["name"] == "mqtt" and d["pending"] == 0 for d in status["destinations"])
    wait_until("metrics", lambda: 'glucose_gateway_uploaded_total{destination="mqtt"} 6' in open(gw.metrics).read(), timeout=10)
    assert gw.stop() == 0
    assert broker.retained(PREFIX + "/status")[PREFIX + "/status"] == "offline"
    everything = gw.log() + json.dumps(status) + Path(gw.metrics).read_text() + gw.command("config", "check").stdout
    assert PASSWORD not in everything


def test_readings_during_a_broker_outage_arrive_after_it(private_bus, standin, meter_file, tmp_path, gateways, broker):
    standin("--time-scale", "20", "--meter", meter_file(meter()))
    gate = Gate(broker.port)
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways, port=gate.port)
    gw.start()
    control(private_bus, "Advertise", A, 20.0)
    wait_until("acknowledged", lambda: mqtt_destination(gw)["uploaded"] == 6, timeout=40)

    gate.close()
    broker.stop()
    for _ in range(3):
        control(private_bus, "AddGeneratedRecord", A)
    control(private_bus, "Advertise", A, 20.0)
    wait_until("stored while the broker is down", lambda: len(gw.sequences(A)) == 10, timeout=30)
    new = [s for s in uploadable(gw) if s > 7]
    assert len(new) == 3

    def failing():
        d = mqtt_destination(gw)
        return d if d["pending"] == 3 and d["last_error"] and d["last_error"]["code"] in (1001, 1002) else None
    wait_until("the error in status", failing, timeout=30)

    broker.start()  # without persistence: the retained configs and states are gone and must come back
    events = broker.subscribe(PREFIX + "/+/reading")  # before the gateway can reach the broker again
    gate.open()
    wait_until("the replay", lambda: mqtt_destination(gw)["uploaded"] == 9, timeout=40)
    got = events.stop(expect=3)
    assert event_sequences(got) == new
    assert mqtt_destination(gw)["pending"] == 0
    retained = wait_until("retained set again", lambda: (lambda r: r if r.get(PREFIX + "/status") == "online"
                                                          and "homeassistant/sensor/%s/glucose_mgdl/config" % METER_ID in r else None)(
        broker.retained("homeassistant/#", PREFIX + "/#")), timeout=20)
    assert "%s/%s/glucose_mgdl" % (PREFIX, METER_ID) in retained
    assert gw.stop() == 0
    gate.close()


def test_a_gateway_without_mqtt_never_maps_libmosquitto(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--time-scale", "20", "--meter", meter_file(meter(count=1)))
    gw = Gateway(tmp_path, private_bus, args=("--quiet-after", "0.3"))
    gateways.append(gw)
    gw.start()
    assert "libmosquitto" not in Path("/proc/%d/maps" % gw.process.pid).read_text()
    assert gw.stop() == 0


def test_kill_9_leaves_the_last_will_offline(private_bus, standin, meter_file, tmp_path, gateways, broker):
    standin("--time-scale", "20", "--meter", meter_file(meter(count=1)))
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways)
    gw.start()
    wait_until("online", lambda: broker.retained(PREFIX + "/status").get(PREFIX + "/status") == "online", timeout=20)
    gw.kill9()
    wait_until("the last will", lambda: broker.retained(PREFIX + "/status").get(PREFIX + "/status") == "offline", timeout=20)


def test_wrong_password_pauses_the_destination_without_showing_it(private_bus, standin, meter_file, tmp_path, gateways, broker):
    standin("--time-scale", "20", "--meter", meter_file(meter(count=2)))
    wrong = "not-the-" + PASSWORD
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways, password=wrong)
    gw.start()
    control(private_bus, "Advertise", A, 20.0)
    wait_until("downloaded", lambda: len(gw.sequences(A)) == 4, timeout=30)
    paused = wait_until("paused", lambda: (lambda d: d if d["state"] == "paused" else None)(mqtt_destination(gw)), timeout=30)
    assert paused["pending"] == 3
    text = gw.command("status").stdout + json.dumps(gw.status()) + gw.log()
    assert wrong not in text and PASSWORD not in text
    assert "refused" in text


@pytest.mark.parametrize("body,words", [
    ('url = "http://127.0.0.1:1883"', "mqtt.url: expected an mqtt:// or mqtts:// URL"),
    ('url = "mqtt://gw:%s@127.0.0.1"' % PASSWORD, "must not carry a user name or password"),
    ('url = "mqtt://127.0.0.1"\ntopic_prefix = "a/#"', "mqtt.topic_prefix"),
    ('url = "mqtt://127.0.0.1"\nusername = "gw"\npassword_file = "open.password"', "accessible by group or others"),
])
def test_bad_mqtt_config_is_one_line_and_exit_78(tmp_path, body, words):
    (tmp_path / "open.password").write_text(PASSWORD)
    os.chmod(tmp_path / "open.password", 0o644)
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\ndatabase = "%s"\n[mqtt]\n%s\n' % (tmp_path / "db.sqlite3", body))
    for args in (["config", "check", str(config)], ["--config", str(config), "run"], ["--config", str(config), "upload"]):
        out = subprocess.run([gateway_binary()] + args, capture_output=True, text=True, timeout=30)
        assert out.returncode == 78, (args, out.stderr)
        assert words in out.stdout + out.stderr
        assert PASSWORD not in out.stdout + out.stderr
        if args[0] != "config":
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_sync_and_upload_publish_the_events_without_the_daemon(private_bus, standin, meter_file, tmp_path, gateways, broker):
    standin("--time-scale", "20", "--meter", meter_file(meter()))
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways)
    events = broker.subscribe(PREFIX + "/+/reading")
    control(private_bus, "Advertise", A, 30.0)
    gw.command("sync", A, "--wait", "20")
    assert event_sequences(events.stop(expect=6)) == [1, 2, 3, 4, 5, 7]

    broker.stop()
    control(private_bus, "AddGeneratedRecord", A)
    control(private_bus, "Advertise", A, 30.0)
    down = gw.command("sync", A, "--wait", "20", check=False)
    assert down.returncode == 75, down.stderr  # stored, upload deferred
    assert uploadable(gw)[-1] == 8
    assert PASSWORD not in down.stdout + down.stderr

    broker.start()
    events = broker.subscribe(PREFIX + "/+/reading")
    up = gw.command("upload", check=False)
    assert up.returncode == 0, up.stderr
    assert event_sequences(events.stop(expect=1)) == [8]
    # One-shot commands hold no availability: only the daemon says online/offline.
    assert PREFIX + "/status" not in broker.retained(PREFIX + "/status")


def make_certificates(directory, names, expired=False):
    """A test CA and a server certificate for `names` (subjectAltName), with openssl; `expired`: one that
    ended in 2020 (`openssl ca` sets the dates)."""
    d = Path(directory)
    run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True, cwd=d)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=gg test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=" + names[0])
    (d / "ext.cnf").write_text("subjectAltName=" + ",".join(("IP:" if n[0].isdigit() else "DNS:") + n for n in names) + "\n")
    if expired:
        (d / "db").mkdir()
        (d / "db" / "index.txt").write_text("")
        (d / "db" / "serial").write_text("01\n")
        (d / "ca.cnf").write_text("[ca]\ndefault_ca = test\n[test]\ndatabase = db/index.txt\nserial = db/serial\nnew_certs_dir = db\n"
                                  "default_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n")
        run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "server.csr", "-out", "server.pem",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-extfile", "ext.cnf")
    else:
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem",
            "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem"


@pytest.mark.parametrize("names,with_ca,tls,expired,words", [
    (["localhost"], True, True, False, None),
    (["localhost"], False, True, False, "unknown CA"),            # the test CA is not in the system store
    (["elsewhere.example"], True, True, False, "not for this host name"),  # the host name is verified
    (["localhost"], True, True, True, "has expired"),
    (["localhost"], True, False, False, "did not answer with TLS"),  # a plain MQTT port
], ids=["verified", "unknown-ca", "wrong-name", "expired", "not-tls"])
def test_mqtts_verifies_the_broker_and_names_the_cause(tmp_path, names, with_ca, tls, expired, words):
    ca = make_certificates(tmp_path, names, expired=expired)
    port = free_port()
    conf = tmp_path / "tls.conf"
    listener = "listener %d 127.0.0.1\nallow_anonymous true\nuser %s\n" % (port, getpass.getuser())
    if tls:
        listener += "cafile %s\ncertfile %s\nkeyfile %s\n" % (ca, tmp_path / "server.pem", tmp_path / "server.key")
    conf.write_text(listener)
    broker = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def listening():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False
        wait_until("TLS listener", listening, timeout=10)
        config = tmp_path / "gw.toml"
        config.write_text('[gateway]\ndatabase = "%s"\n[mqtt]\nurl = "mqtts://localhost:%d"\n%s'
                          % (tmp_path / "db.sqlite3", port, 'ca_file = "%s"\n' % ca if with_ca else ""))
        out = subprocess.run([gateway_binary(), "--config", str(config), "upload", "--check"], capture_output=True, text=True, timeout=60)
        if words is None:
            assert out.returncode == 0, out.stdout + out.stderr
            assert "mqtt: credentials accepted" in out.stdout
        else:
            assert out.returncode == 75, out.stdout + out.stderr
            assert "TLS" in out.stdout + out.stderr
            assert words in out.stdout + out.stderr, out.stdout + out.stderr
            assert str(ca) not in out.stdout + out.stderr
    finally:
        stop_process(broker)


def test_a_hi_replaces_the_last_number_and_unpair_clears_the_meter(private_bus, standin, meter_file, tmp_path, gateways, broker):
    records = [{"sequence": 1, "time": "2024-03-05T06:00:00", "timeOffset": 0, "mgdl": 121},
               {"sequence": 2, "time": "2024-03-05T06:10:00", "timeOffset": 0, "result": "high"}]
    standin("--time-scale", "20", "--meter", meter_file(dict(meter(), records=records)))
    gw = mqtt_gateway(tmp_path, private_bus, broker, gateways)
    gw.start()
    control(private_bus, "Advertise", A, 20.0)
    topic = lambda key: "%s/%s/%s" % (PREFIX, METER_ID, key)

    def shown():
        s = broker.retained("homeassistant/#", PREFIX + "/#")
        return s if s.get(topic("glucose_result")) == "HI" else None
    s = wait_until("the HI shown", shown, timeout=40)
    assert s[topic("glucose_mgdl")] == "None" and s[topic("glucose_mmol")] == "None"  # unknown in Home Assistant, not 121
    assert s[topic("glucose_time")] == "2024-03-05T06:10:00.000+00:00"
    assert json.loads(s[topic("glucose_attributes")])["result"] == "HI"
    assert "121" not in [v for k, v in s.items() if k.startswith(PREFIX + "/" + METER_ID)]
    assert json.loads(s["homeassistant/sensor/%s/glucose_result/config" % METER_ID])["device_class"] == "enum"

    gw.command("unpair", A)
    mine = lambda r: sorted(k for k in r if METER_ID in k)
    wait_until("the meter's retained topics cleared", lambda: not mine(broker.retained("homeassistant/#", PREFIX + "/#")), timeout=30)
    assert gw.stop() == 0
    # The restarted daemon's first refresh publishes every topic it wants, the gateway-wide ones last: a
    # fresh (not retained-on-subscribe) message on one of those is the event that the refresh is out.
    refresh = broker.subscribe(PREFIX + "/gateway/pending")
    gw.start()
    fresh = refresh.stop(expect=2)  # the retained one from the first run, then the new run's publish
    assert [m for m in fresh if not m[1]], fresh
    after = broker.retained("homeassistant/#", PREFIX + "/#")
    assert not mine(after), mine(after)
    assert PREFIX + "/gateway/pending" in after
    assert gw.stop() == 0


def test_an_unsolicited_publish_from_the_broker_is_refused(private_bus, standin, meter_file, tmp_path, gateways):
    """A broker that answers CONNACK and then sends a PUBLISH announcing 60 MB: the gateway subscribes to
    nothing, so it closes the connection before libmosquitto reads the message (the memory figures are the
    benchmark's, scripts/bench/mqtt_hostile.py)."""
    standin("--time-scale", "20", "--meter", meter_file(meter(count=1)))
    hostile = subprocess.Popen(["/usr/bin/python3", str(Path(__file__).resolve().parent / "hostile_broker.py"), "--mode", "publish"],
                               stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(hostile.stdout.readline())["port"]
        gw = Gateway(tmp_path, private_bus, extra_config='[mqtt]\nurl = "mqtt://127.0.0.1:%d"\n' % port, args=("--quiet-after", "0.3"))
        gateways.append(gw)
        gw.start()
        wait_until("the PUBLISH refused", lambda: "unsolicited PUBLISH (62914560 bytes announced)" in gw.log(), timeout=30)
        assert gw.process.poll() is None
        assert gw.stop() == 0
    finally:
        stop_process(hostile)
