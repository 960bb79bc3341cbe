"""scripts/install.sh and uninstall.sh in their live mode (no --root): the system user made by
systemd-sysusers, ownership, and the systemctl/udevadm calls. They run in a private mount namespace where
/etc is a copy, /usr/local a scratch directory and /var/lib an overlay, with systemctl, udevadm, dpkg-query
and apt-get replaced by recorders, so the machine running the tests is not changed. That needs root; as
another user the test checks that the scripts refuse the live mode."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = os.environ.get("GLUCOSE_GATEWAY_BIN", str(REPO / ".build/debug/glucose-gateway"))

STUB = """#!/bin/sh
echo "{name} $*" >> {log}
"""

# Runs inside `unshare --mount`. Every step is checked; the install starts only once /etc is the copy.
SCRIPT = r"""
set -euo pipefail
work="$1"; repo="$2"; binary="$3"
cp -a /etc/. "$work/etc/"
mount --bind "$work/etc" /etc
mount --bind "$work/usrlocal" /usr/local
mount -t overlay overlay -o "lowerdir=/var/lib,upperdir=$work/up,workdir=$work/wk" /var/lib
# Refuse to go on unless the mounts are in place.
[[ "$(stat -c %d:%i /etc)" == "$(stat -c %d:%i "$work/etc")" ]]
[[ "$(stat -c %d:%i /usr/local)" == "$(stat -c %d:%i "$work/usrlocal")" ]]
findmnt -n -o FSTYPE /var/lib | grep -qx overlay
export PATH="$work/stub:/usr/sbin:/usr/bin:/sbin:/bin"

"$repo/scripts/install.sh" --binary "$binary" > "$work/install.out"
echo "user=$(getent passwd glucose-gateway | cut -d: -f1,6,7)"
echo "groups=$(id -nG glucose-gateway)"
echo "conf=$(stat -c '%a %U:%G' /etc/glucose-gateway /etc/glucose-gateway/glucose-gateway.toml | tr '\n' ' ')"
echo "state=$(stat -c '%a %U:%G' /var/lib/glucose-gateway)"
echo "bin=$(stat -c '%a %U:%G' /usr/local/bin/glucose-gateway)"
runuser -u glucose-gateway -- /usr/local/bin/glucose-gateway config check > /dev/null && echo "service-user-config-check=ok"
# The service user creates the database; uninstall keeps it.
runuser -u glucose-gateway -- sh -c 'umask 077; echo db > /var/lib/glucose-gateway/gateway.sqlite3'

"$repo/scripts/uninstall.sh" > "$work/uninstall.out"
echo "user-after=$(getent passwd glucose-gateway || echo none)"
echo "group-after=$(getent group glucose-gateway || echo none)"
echo "left=$(ls -A /var/lib/glucose-gateway | tr '\n' ' ')"
for f in /usr/local/bin/glucose-gateway /etc/systemd/system/glucose-gateway.service /etc/udev/rules.d/90-glucose-gateway.rules \
         /etc/dbus-1/system.d/glucose-gateway.conf /etc/sysusers.d/glucose-gateway.conf /etc/glucose-gateway \
         /usr/local/share/doc/glucose-gateway; do
    [[ -e "$f" ]] && echo "still-there=$f"
done
"$repo/scripts/uninstall.sh" --purge > /dev/null
echo "after-purge=$([[ -e /var/lib/glucose-gateway ]] && echo present || echo gone)"
"""


def test_live_install_and_uninstall(tmp_path):
    if os.geteuid() != 0:
        for script in ("install.sh", "uninstall.sh"):
            r = subprocess.run([str(REPO / "scripts" / script)], capture_output=True, text=True, timeout=30)
            assert r.returncode == 77 and "run as root" in r.stderr
        return

    def host_state():
        user = subprocess.run(["getent", "passwd", "glucose-gateway"], capture_output=True, text=True).stdout
        return user, os.path.exists("/etc/glucose-gateway"), os.path.exists("/usr/local/bin/glucose-gateway")

    before = host_state()
    for d in ("etc", "usrlocal", "up", "wk", "stub"):
        (tmp_path / d).mkdir()
    log = tmp_path / "calls.log"
    for name in ("systemctl", "udevadm"):
        stub = tmp_path / "stub" / name
        stub.write_text(STUB.format(name=name, log=log))
        stub.chmod(0o755)
    (tmp_path / "stub" / "dpkg-query").write_text("#!/bin/sh\nprintf 'install ok installed'\n")
    (tmp_path / "stub" / "apt-get").write_text("#!/bin/sh\necho 'apt-get must not run here' >&2\nexit 1\n")
    for name in ("dpkg-query", "apt-get"):
        (tmp_path / "stub" / name).chmod(0o755)
    # The scratch directories must be reachable by the service user for its own checks.
    os.chmod(tmp_path, 0o755)

    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", SCRIPT, "live",
                        str(tmp_path), str(REPO), BIN], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    facts = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    assert facts["user"] == "glucose-gateway:/var/lib/glucose-gateway:/usr/sbin/nologin"
    assert "bluetooth" in facts["groups"].split()
    assert facts["conf"].split() == ["750", "root:glucose-gateway", "640", "root:glucose-gateway"]
    assert facts["state"] == "700 glucose-gateway:glucose-gateway"
    assert facts["bin"] == "755 root:root"
    assert facts["service-user-config-check"] == "ok"
    assert facts["user-after"] == "none"
    assert facts["group-after"] == "none"
    assert facts["left"].split() == ["gateway.sqlite3"]
    assert "still-there" not in facts, r.stdout
    assert facts["after-purge"] == "gone"

    calls = log.read_text().splitlines()
    install_calls = calls[:calls.index("systemctl disable --now glucose-gateway.service")]
    assert install_calls[0] == "systemctl daemon-reload"
    assert "udevadm control --reload-rules" in install_calls
    assert install_calls[-2:] == ["systemctl enable glucose-gateway.service", "systemctl restart glucose-gateway.service"]
    assert "systemctl daemon-reload" in calls[calls.index("systemctl disable --now glucose-gateway.service"):]

    # Nothing leaked to this machine.
    assert host_state() == before
