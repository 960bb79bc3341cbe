// Benchmarks: run in release, `swift run -c release glucose-gateway-bench --help`.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let benchArguments = Array(CommandLine.arguments.dropFirst())
switch benchArguments.first {
case "store-insert": exit(await StoreInsertBenchmark.run(Array(benchArguments.dropFirst())))
case "codec": exit(CodecBenchmark.run(Array(benchArguments.dropFirst())))
case "store-writer": exit(await StoreWriter.run(Array(benchArguments.dropFirst())))
case "download": exit(await DownloadBenchmark.run(Array(benchArguments.dropFirst())))
case "daemon-soak": exit(await DaemonSoak.run(Array(benchArguments.dropFirst())))
case "upload-replay", "upload-resume", "upload-seed":
    exit(await UploadBenchmark.run(benchArguments[0], Array(benchArguments.dropFirst())))
case "upload-hostile": exit(await UploadHostileBenchmark.run(Array(benchArguments.dropFirst())))
case "sync-vs-peer": exit(await SyncVsPeerBenchmark.run(Array(benchArguments.dropFirst())))
case "bluez-notify": exit(await BlueZNotifyBenchmark.run(Array(benchArguments.dropFirst())))
case "bluez-notify-peer": exit(await BlueZNotifyBenchmark.peer(Array(benchArguments.dropFirst())))
default:
    print("usage: glucose-gateway-bench NAME")
    print("  store-insert   bulk insert of readings into SQLite, readings per second")
    print("  download       a 1,000-record meter download through the BlueZ stand-in: CPU seconds, peak RSS")
    print("  sync-vs-peer   a 1,000-record sync with upload, the gateway against a bleak-based Python peer: CPU, peak RSS")
    print("  daemon-soak    run through a simulated hour: RSS growth, idle CPU, advertising-to-stored latency")
    print("  upload-replay  10,000-reading backlog to the loopback Nightscout: seconds and requests")
    print("  upload-resume  network back -> first batch acknowledged (--mode event|probe)")
    print("  upload-hostile daemon memory against 200 answers of 100 MB: baseline, peak and after (KiB)")
    print("  upload-seed    fill a database with synthetic readings (--database PATH --count N)")
    print("  codec          0x2A18 decodes per second on one thread")
    print("  bluez-notify   GATT notifications through D-Bus to a meter link: rate, CPU, idle wake-ups")
}
