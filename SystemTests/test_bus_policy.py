"""The gateway as an unprivileged user on a bus with the system bus's default-deny policy, bluetoothd's own
policy, and our config/glucose-gateway-dbus.conf: `scan` and `pair` (whose passkey agent is called back by
bluetoothd) work, and without our file the same user is refused. This catches AccessDenied regressions
that a permissive test bus hides. As root, "nobody" stands in for the glucose-gateway user."""
import json
import os
import pathlib
import pwd
import shutil
import subprocess
import tempfile

import pytest

from gg_bus import Simulator, gateway_binary, stop_process, wait_until

REPO = pathlib.Path(__file__).resolve().parents[1]
POLICY = REPO / "config" / "glucose-gateway-dbus.conf"
ADDRESS = "C0:26:DA:05:06:07"
PIN = "246810"

# system.conf's defaults, then bluetoothd's part of bluetooth.conf (root owns org.bluez and may call back
# into agents and GATT applications), then our file.
BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="UpdateActivationEnvironment"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Debug.Stats"/>
  </policy>
  <policy user="root">
    <allow own="org.bluez"/>
    <allow send_destination="org.bluez"/>
    <allow send_interface="org.bluez.Agent1"/>
    <allow send_interface="org.bluez.AdvertisementMonitor1"/>
    <allow send_interface="org.bluez.GattCharacteristic1"/>
    <allow send_interface="org.bluez.GattDescriptor1"/>
    <allow send_interface="org.bluez.GattProfile1"/>
    <allow send_interface="org.freedesktop.DBus.ObjectManager"/>
    <allow send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  {include}
  <limit name="max_replies_per_connection">100000</limit>
</busconfig>
"""


@pytest.fixture
def policy_bus(request):
    """A private bus with the policies above; with_policy decides whether our file is included."""
    with_policy = request.param
    user = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    directory = tempfile.mkdtemp(prefix="gw-policy-bus-", dir="/tmp")
    os.chmod(directory, 0o755)  # the stand-in user reaches the socket
    socket_path = os.path.join(directory, "bus.sock")
    policy = pathlib.Path(directory, "gw.conf")
    policy.write_text(POLICY.read_text().replace('user="glucose-gateway"', 'user="%s"' % user))
    include = "<include>%s</include>" % policy if with_policy else ""
    conf = pathlib.Path(directory, "bus.conf")
    conf.write_text(BUS_CONFIG.replace("{socket}", socket_path).replace("{include}", include))
    bus = subprocess.Popen(["dbus-daemon", "--nofork", "--nopidfile", "--config-file=%s" % conf],
                           stdout=subprocess.DEVNULL, stderr=open(os.path.join(directory, "bus.log"), "w"))
    try:
        def listening():
            assert bus.poll() is None, pathlib.Path(directory, "bus.log").read_text()
            return os.path.exists(socket_path)

        wait_until("dbus-daemon to create its socket", listening, timeout=10, interval=0.01)
        yield {"address": "unix:path=" + socket_path, "user": user, "with_policy": with_policy, "directory": directory}
    finally:
        stop_process(bus)
        shutil.rmtree(directory, ignore_errors=True)


def as_user(user, argv):
    entry = pwd.getpwnam(user)
    if entry.pw_uid == os.geteuid():
        return argv
    return ["setpriv", "--reuid=%d" % entry.pw_uid, "--regid=%d" % entry.pw_gid, "--clear-groups"] + argv


@pytest.mark.parametrize("policy_bus", [True, False], ids=["with-policy", "without-policy"], indirect=True)
def test_unprivileged_gateway_reaches_bluez_only_through_the_policy(policy_bus, tmp_path):
    bus, user = policy_bus["address"], policy_bus["user"]
    if os.geteuid() != 0:
        # Two users are needed (bluetoothd's and the gateway's); without root only the file itself is checked
        # here, and SystemTests/test_packaging.py checks it on a bus with one user.
        assert 'send_destination="org.bluez"' in POLICY.read_text()
        return
    meter = {"address": ADDRESS, "name": "meter+policy", "pin": PIN, "bonding": True, "advertising": "always",
             "records": [{"sequence": 1, "time": "2024-03-05T07:00:00", "timeOffset": 0, "mgdl": 101}]}
    meter_path = tmp_path / "meter.json"
    meter_path.write_text(json.dumps(meter))
    standin = Simulator(["--standin", "--bus", bus, "--meter", str(meter_path)], log_path=str(tmp_path / "standin.log"))
    # A directory the stand-in user can write its database to.
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gw-policy-", dir="/tmp"))
    try:
        standin.wait_for_line("ready", timeout=20)
        entry = pwd.getpwnam(user)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
        config = workdir / "gw.toml"
        config.write_text('[gateway]\ndatabase = "%s"\n' % (workdir / "gateway.sqlite3"))
        os.chmod(config, 0o644)
        env = {"PATH": "/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS": bus, "TZ": "UTC"}

        scan = subprocess.run(as_user(user, [gateway_binary(), "--config", str(config), "scan", "--timeout", "3"]),
                              capture_output=True, text=True, timeout=60, env=env)
        pair = subprocess.run(as_user(user, [gateway_binary(), "--config", str(config), "pair", ADDRESS, "--pin", PIN,
                                             "--timezone", "UTC", "--wait", "20"]),
                              capture_output=True, text=True, timeout=90, env=env)
        if policy_bus["with_policy"]:
            assert scan.returncode == 0, scan.stderr
            assert ADDRESS in scan.stdout
            assert pair.returncode == 0, pair.stderr + standin.log_text()
            assert "paired %s" % ADDRESS in pair.stdout
        else:
            # The bus itself refuses the calls: the user may not talk to org.bluez at all.
            assert scan.returncode == 69
            assert "org.freedesktop.DBus.Error.AccessDenied" in scan.stderr
            assert pair.returncode == 69
            assert "org.freedesktop.DBus.Error.AccessDenied" in pair.stderr
    finally:
        standin.stop()
        shutil.rmtree(workdir, ignore_errors=True)
