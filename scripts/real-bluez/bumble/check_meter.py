"""check_meter.py [METER-ARGS...]: the Bumble meter against a Bumble central, without a kernel or a VM.

    $RB_WORK/bumble-0.0.236/bin/python scripts/real-bluez/bumble/check_meter.py [--pairing legacy-passkey]

A quick check of meter.py itself (seconds, on the host): the central pairs with the meter's PIN (keyboard
only), reads the features, reports all records, disconnects, connects again and encrypts with the bond's
key, and reports all records again. It prints what it did; exit 0 when every record arrived twice with
the RACP success response after each report, 1 otherwise. With `--unfixed` the meter answers a
reconnection's key request as Bumble 0.0.236 does by itself (after legacy pairing the reconnection then
ends with a MIC failure, 0x3D): the check shows the fix is needed.
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import meter as mm  # noqa: E402
from bumble import hci  # noqa: E402
from bumble.controller import Controller  # noqa: E402
from bumble.device import Device, Peer  # noqa: E402
from bumble.keys import MemoryKeyStore  # noqa: E402
from bumble.pairing import PairingConfig, PairingDelegate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Keyboard(PairingDelegate):
    def __init__(self, pin):
        super().__init__(io_capability=PairingDelegate.KEYBOARD_INPUT_ONLY)
        self.pin = pin

    async def get_number(self):
        return self.pin


async def report(peer):
    await peer.discover_services()
    for s in peer.services:
        await s.discover_characteristics()
    chars = {c.uuid.to_hex_str(): c for s in peer.services for c in s.characteristics}
    print("features", (await chars["2A51"].read_value()).hex())
    got = []
    done = asyncio.get_running_loop().create_future()
    await chars["2A18"].subscribe(lambda v: got.append(bytes(v)))
    await chars["2A52"].subscribe(lambda v: done.done() or done.set_result(bytes(v)), prefer_notify=False)
    await chars["2A52"].write_value(bytes([1, 1]), with_response=True)
    response = await asyncio.wait_for(done, 10)
    print(f"{len(got)} records, RACP response {response.hex()}")
    return got, response


async def main(argv):
    unfixed = "--unfixed" in argv
    argv = [a for a in argv if a != "--unfixed"]
    if unfixed:
        mm.MeterDevice.get_long_term_key = Device.get_long_term_key
    args = mm.arguments(["--meter", os.path.join(HERE, "..", "meters", "base.json")] + argv)
    meters = mm.load_meters(args)
    made = {}

    async def gateway(args, link):
        c = Controller("central", link=link, public_address="00:AA:01:00:00:00")
        mm.legacy_features(c)
        made["c"] = c
        return c

    task = asyncio.create_task(mm.serve(args, meters, gateway))
    # Until every meter advertises (serve() ends only with an error).
    while not (meters[-1].device is not None and meters[-1].device.is_advertising):
        await asyncio.sleep(0.2)
        if task.done():
            task.result()
    central = Device.with_hci("central", hci.Address("00:AA:01:00:00:00"), made["c"], made["c"])
    central.keystore = MemoryKeyStore()
    central.pairing_config_factory = lambda c: PairingConfig(delegate=Keyboard(meters[0].m.pin))
    await central.power_on()
    target = hci.Address(meters[0].m.address, hci.Address.PUBLIC_DEVICE_ADDRESS)
    ok = True
    for attempt in ("pair", "reconnect"):
        connection = await central.connect(target, own_address_type=hci.OwnAddressType.PUBLIC)
        try:
            if attempt == "pair":
                await connection.pair()
            else:
                await connection.encrypt()
            print(f"{attempt}: encrypted")
            got, response = await report(Peer(connection))
            ok = ok and len(got) == len(meters[0].m.records) and response == bytes([6, 0, 1, 1])
            await connection.disconnect()
        except (Exception, asyncio.CancelledError) as e:  # the check reports, it does not crash
            print(f"{attempt}: failed: {e!r}")
            return 1
        await asyncio.sleep(0.3)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
