#if canImport(Glibc)
import Glibc
#endif

/// `sync-vs-peer`: one meter download with upload, done by the gateway and by a bleak-based Python
/// gateway (`scripts/bench/bleak_peer.py`), measured side by side in one run.
///
/// A private dbus-daemon, `glucose-gateway-simulator --standin` with N records and the loopback
/// Nightscout double (`SystemTests/fake_nightscout.py`). Each run, in alternating order: pair, then
/// `glucose-gateway sync` on a fresh database with `[nightscout]` set (CPU user+sys from `wait4`, peak RSS
/// as `VmHWM`); the same sync under `/usr/bin/time -f "%U %S %M"`; and the peer doing the same job on a
/// fresh database. Every one must leave all N readings on the server. `--strace PATH` adds one sync
/// under `strace -f -c -o PATH`; `--peer-notify acquire` has the peer take measurements and contexts
/// through `AcquireNotify` sockets too (`start`, bleak's default: `StartNotify`). `--notify start` starts the
/// stand-in without `AcquireNotify`, so every notification reaches both parties as a D-Bus signal (the
/// fallback path; the default `acquire` offers it as bluetoothd does). `--against PATH` measures a second
/// gateway build in the same run, its sync next to the first one's in every round (which goes first
/// alternates), and prints the two builds' CPU ratio round by round. `--simulator PATH` runs the stand-in
/// from another binary than the gateway, so that two builds meet the same meter. Run from the repository
/// root (or pass `--server`, `--peer`, `--python`).
/// Only processes it started are stopped, by pid.
enum SyncVsPeerBenchmark {
    static let address = "C0:26:DA:0B:E4:02"
    static let usage = "sync-vs-peer [--records N] [--runs K] [--gateway PATH] [--python PATH] [--peer PATH] [--server PATH] [--strace PATH] [--peer-notify start|acquire] [--notify acquire|start] [--against PATH] [--simulator PATH]"

    struct Figures {
        var cpu: [Double] = []
        var rss: [Int] = []
        var wall: [Double] = []
    }

    static func run(_ args: [String]) async -> Int32 {
        guard let o = BenchArguments(args, names: ["records", "runs", "gateway", "python", "peer", "server", "strace", "peer-notify",
                                                               "notify", "against", "simulator"], usage: usage) else { return 64 }
        let records = o.int("records", 1000)
        let runs = o.int("runs", 5)
        let gateway = o.string("gateway", DownloadBenchmark.siblingExecutable("glucose-gateway"))
        let python = o.string("python", ".venv/bin/python")
        let peer = o.string("peer", "scripts/bench/bleak_peer.py")
        let script = o.string("server", "SystemTests/fake_nightscout.py")
        let peerNotify = o.string("peer-notify", "start")
        let peerAcquires = peerNotify == "acquire"
        let standInAcquire = o.string("notify", "acquire") == "acquire"
        let against = o.has("against") ? o.string("against", "") : nil
        let simulator = o.string("simulator", DownloadBenchmark.simulator(besideGateway: gateway))
        guard (1...65_000).contains(records), (1...100).contains(runs), access(gateway, X_OK) == 0,
              access(python, X_OK) == 0, access(peer, R_OK) == 0, ["start", "acquire"].contains(peerNotify),
              ["start", "acquire"].contains(o.string("notify", "acquire")), standInAcquire || !peerAcquires,
              against.map({ access($0, X_OK) == 0 }) ?? true, access(simulator, X_OK) == 0 else {
            print("sync-vs-peer: need 1...65000 records, 1...100 runs, --peer-notify start or acquire, --notify acquire or start "
                  + "(--peer-notify acquire needs --notify acquire), an executable gateway (\(gateway)) and --against and --simulator if given, "
                  + "python with bleak (\(python): `source scripts/install-deps.sh --test`) and the peer (\(peer))")
            return 64
        }
        func fail(_ message: String) -> Int32 {
            print("sync-vs-peer: " + message)
            return 1
        }

        guard let dir = DownloadBenchmark.makeScratchDirectory("peer") else { return fail("cannot create a temporary directory") }
        var started: [pid_t] = []
        let server: Server
        do {
            server = try Server(script: script)
        } catch {
            return fail("\(error)")
        }
        defer {
            for pid in started.reversed() { DownloadBenchmark.stop(pid) }
            server.stop()
            _ = DownloadBenchmark.spawn(["/bin/rm", "-rf", dir], environment: [:]).map(DownloadBenchmark.waitStatus)
        }

        let bus: String
        do {
            bus = try DownloadBenchmark.startPrivateBus(in: dir, started: &started)
        } catch {
            return fail(error.description)
        }
        let env = ["DBUS_SYSTEM_BUS_ADDRESS": bus, "TZ": "UTC"]
        guard let sim = DownloadBenchmark.spawn([simulator, "--standin", "--address", address, "--name", "meter+peer",
                                                 "--pin", "123456", "--records", String(records)] + (standInAcquire ? [] : ["--no-acquire-notify"]),
                                                environment: env, captureOutput: true)
        else { return fail("cannot start the simulator") }
        started.append(sim.pid)
        guard let out = sim.output, DownloadBenchmark.readLine(fd: out, prefix: "ready", seconds: 20) else {
            return fail("the simulator did not become ready")
        }

        var gatewayFigures = Figures()
        var timedFigures = Figures()
        var peerFigures = Figures()
        var againstFigures = Figures()
        var setup = 0
        /// A paired gateway config on a fresh database, and an empty server.
        func prepareGateway() async -> String? {
            setup += 1
            let config = dir + "/gw\(setup).toml"
            let secretFile = dir + "/secret"
            guard DownloadBenchmark.write(file: secretFile, Server.secret),
                  DownloadBenchmark.write(file: config, """
                  [gateway]
                  database = "\(dir)/gw\(setup).sqlite3"
                  [nightscout]
                  url = "\(server.url)"
                  api_secret_file = "\(secretFile)"

                  """),
                  let pair = DownloadBenchmark.spawn([gateway, "--config", config, "pair", address, "--pin", "123456"], environment: env),
                  DownloadBenchmark.waitStatus(pair).status == 0 else { return nil }
            guard (try? await server.control(#"{"mode": "ok"}"#)) != nil, (try? await server.reset()) != nil else { return nil }
            return config
        }
        func serverHoldsAll() async -> Bool { (try? await server.count()) == records }
        /// Runs `argv` to its end, sampled: its wall time goes into `figures`, and its CPU seconds and peak
        /// memory too once it exited 0 and the server holds every reading; nil then, else why not.
        func measure(_ argv: [String], into figures: inout Figures, what: String, uploader: String, hint: String = "") async -> String? {
            let t0 = DownloadBenchmark.monotonicSeconds()
            guard let process = DownloadBenchmark.spawn(argv, environment: env) else { return "cannot start \(what)" }
            let result = DownloadBenchmark.waitStatusSampling(process)
            figures.wall.append(DownloadBenchmark.monotonicSeconds() - t0)
            guard result.status == 0 else { return "\(what) exited \(result.status)\(hint)" }
            guard await serverHoldsAll() else { return "\(uploader) left the server without all \(records) readings" }
            figures.cpu.append(result.cpuSeconds)
            figures.rss.append(result.highWaterKilobytes)
            return nil
        }

        for run in 0..<runs {
            let order = against == nil ? [0, 1, 2] : [0, 3, 1, 2]
            for part in (run % 2 == 0 ? order : order.reversed()) {
                switch part {
                case 0:
                    guard let config = await prepareGateway() else { return fail("pairing or server reset failed") }
                    if let failure = await measure([gateway, "--config", config, "sync"], into: &gatewayFigures,
                                                   what: "sync", uploader: "the gateway's sync") { return fail(failure) }
                case 3:
                    guard let against, let config = await prepareGateway() else { return fail("pairing or server reset failed") }
                    if let failure = await measure([against, "--config", config, "sync"], into: &againstFigures,
                                                   what: "the --against sync", uploader: "the --against sync") { return fail(failure) }
                case 1:
                    guard let config = await prepareGateway() else { return fail("pairing or server reset failed") }
                    let report = dir + "/time\(setup).txt"
                    guard let sync = DownloadBenchmark.spawn(["/usr/bin/time", "-f", "%U %S %M", "-o", report, gateway, "--config", config, "sync"],
                                                             environment: env),
                          DownloadBenchmark.waitStatus(sync).status == 0 else { return fail("sync under /usr/bin/time failed") }
                    guard await serverHoldsAll() else { return fail("the gateway's sync left the server without all \(records) readings") }
                    let fields = (read(file: report) ?? "").split(whereSeparator: { $0 == " " || $0 == "\n" })
                    guard fields.count >= 3, let user = Double(fields[fields.count - 3]), let system = Double(fields[fields.count - 2]),
                          let rss = Int(fields[fields.count - 1]) else { return fail("cannot read /usr/bin/time's report") }
                    timedFigures.cpu.append(user + system)
                    timedFigures.rss.append(rss)
                default:
                    guard (try? await server.control(#"{"mode": "ok"}"#)) != nil, (try? await server.reset()) != nil else { return fail("server reset failed") }
                    setup += 1
                    if let failure = await measure([python, peer, "--address", address, "--database", dir + "/peer\(setup).sqlite3",
                                                    "--url", server.url, "--secret", Server.secret] + (peerAcquires ? ["--acquire"] : []),
                                                   into: &peerFigures,
                                                   what: "the peer", uploader: "the peer", hint: " (run it by hand to see why)") {
                        return fail(failure)
                    }
                }
            }
        }

        if o.has("strace") {
            let path = o.string("strace", "")
            guard let config = await prepareGateway(),
                  let traced = DownloadBenchmark.spawn(["strace", "-f", "-c", "-o", path, gateway, "--config", config, "sync"], environment: env),
                  DownloadBenchmark.waitStatus(traced).status == 0 else { return fail("the sync under strace failed") }
        }

        func median<T: Comparable>(_ v: [T]) -> T { v.sorted()[v.count / 2] }
        func mb(_ kb: Int) -> String { DownloadBenchmark.fmt(Double(kb) / 1024) }
        let gatewayCPU = median(gatewayFigures.cpu)
        let peerCPU = median(peerFigures.cpu)
        print("sync-vs-peer: \(records) records downloaded, stored and uploaded to the loopback Nightscout, median of \(runs) runs")
        print("  gateway (wait4):          CPU \(DownloadBenchmark.fmt(gatewayCPU)) s (min \(DownloadBenchmark.fmt(gatewayFigures.cpu.min() ?? 0)), "
              + "max \(DownloadBenchmark.fmt(gatewayFigures.cpu.max() ?? 0))), peak RSS \(mb(median(gatewayFigures.rss))) MB (max \(mb(gatewayFigures.rss.max() ?? 0))), "
              + "wall \(DownloadBenchmark.fmt(median(gatewayFigures.wall))) s")
        print("  gateway (/usr/bin/time):  CPU \(DownloadBenchmark.fmt(median(timedFigures.cpu))) s, peak RSS \(mb(median(timedFigures.rss))) MB")
        print("  bleak peer\(peerAcquires ? ", AcquireNotify" : "") (wait4): CPU \(DownloadBenchmark.fmt(peerCPU)) s (min \(DownloadBenchmark.fmt(peerFigures.cpu.min() ?? 0)), "
              + "max \(DownloadBenchmark.fmt(peerFigures.cpu.max() ?? 0))), peak RSS \(mb(median(peerFigures.rss))) MB (max \(mb(peerFigures.rss.max() ?? 0))), "
              + "wall \(DownloadBenchmark.fmt(median(peerFigures.wall))) s")
        if let against {
            let cpu = median(againstFigures.cpu)
            print("  --against (wait4):        CPU \(DownloadBenchmark.fmt(cpu)) s (min \(DownloadBenchmark.fmt(againstFigures.cpu.min() ?? 0)), "
                  + "max \(DownloadBenchmark.fmt(againstFigures.cpu.max() ?? 0))), peak RSS \(mb(median(againstFigures.rss))) MB (max \(mb(againstFigures.rss.max() ?? 0))), "
                  + "wall \(DownloadBenchmark.fmt(median(againstFigures.wall))) s: \(against)")
            let pairs = zip(againstFigures.cpu, gatewayFigures.cpu).compactMap { $1 > 0 ? $0 / $1 : nil }
            if !pairs.isEmpty {
                print("  --against/gateway CPU round by round: median \(DownloadBenchmark.fmt(median(pairs))), "
                      + "min \(DownloadBenchmark.fmt(pairs.min() ?? 0)), max \(DownloadBenchmark.fmt(pairs.max() ?? 0)) of \(pairs.count); "
                      + "--against/peer CPU: \(DownloadBenchmark.fmt(peerCPU > 0 ? cpu / peerCPU : 0))")
            }
        }
        let ratio = peerCPU > 0 ? gatewayCPU / peerCPU : 0
        print("  gateway/peer CPU: \(DownloadBenchmark.fmt(ratio)) (goal <= \(standInAcquire ? "0.200, socket path" : "0.333, D-Bus path")); gateway peak RSS goal <= 16.000 MB")
        // Each round measures both within a second or two, so its ratio is less moved by the machine's
        // speed drifting over the run than the ratio of the two medians.
        let rounds = zip(gatewayFigures.cpu, peerFigures.cpu).compactMap { $1 > 0 ? $0 / $1 : nil }
        if !rounds.isEmpty {
            print("  gateway/peer CPU round by round: median \(DownloadBenchmark.fmt(median(rounds))), "
                  + "min \(DownloadBenchmark.fmt(rounds.min() ?? 0)), max \(DownloadBenchmark.fmt(rounds.max() ?? 0)) of \(rounds.count)")
        }
        if o.has("strace") {
            print("  strace -f -c of one gateway sync:")
            print(read(file: o.string("strace", "")) ?? "(no report)")
        }
        return 0
    }

    static func read(file path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
