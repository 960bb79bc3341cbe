#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support

/// `store-insert`: bulk insert of readings into a fresh database file, in batches of one transaction each,
/// with outbox rows for the configured number of destinations. Prints readings per second.
enum StoreInsertBenchmark {
    static let usage = """
        usage: glucose-gateway-bench store-insert [--count N] [--batch N] [--destinations 0|1|2] [--path FILE]
          --count         readings to insert (default 100000)
          --batch         readings per transaction (default 1000)
          --destinations  outbox rows per reading (default 2: nightscout and fhir)
          --path          database file (default a fresh file under /tmp, removed afterwards)

        """

    static func run(_ arguments: [String]) async -> Int32 {
        guard let options = BenchOptions(arguments, defaults: ["count": 100_000, "batch": 1000, "destinations": 2]),
              let count = options.numbers["count"], let batch = options.numbers["batch"],
              let destinations = options.numbers["destinations"], count > 0, batch > 0, (0...2).contains(destinations)
        else {
            StandardStream.writeError(usage)
            return 64
        }
        let path = options.path ?? "/tmp/glucose-gateway-bench-\(getpid()).sqlite3"
        let removeAfterwards = options.path == nil
        defer { if removeAfterwards { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } } }

        let builders = Array([BenchBuilder(destination: .nightscout), BenchBuilder(destination: .fhir)].prefix(destinations))
        let readings = (0..<count).map { benchReading(meter: "AA:BB:CC:00:00:01", sequence: $0) }
        do {
            let store = try SQLiteStore(path: path, builders: builders)
            var meter = MeterInfo(address: "AA:BB:CC:00:00:01", timeZone: "Europe/Berlin")
            meter.name = "Bench meter"
            try await store.saveMeter(meter)
            let clock = ContinuousClock()
            let cpuStart = processCPUSeconds()
            let start = clock.now
            var inserted = 0
            var index = 0
            while index < readings.count {
                let end = min(index + batch, readings.count)
                inserted += try await store.insert(Array(readings[index..<end]))
                index = end
            }
            let elapsed = clock.now - start
            let cpu = processCPUSeconds() - cpuStart
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let pending = try await store.metrics().destinations.values.reduce(0) { $0 + $1.pending }
            await store.close()
            guard inserted == count, pending == count * destinations else {
                StandardStream.writeError("store-insert: inserted \(inserted) of \(count), \(pending) outbox rows\n")
                return 1
            }
            let rate = Double(count) / seconds
            StandardStream.writeOutput(
                "store-insert: \(count) readings, \(batch) per transaction, \(destinations) destination(s): "
                    + "\(formatted(seconds, digits: 3)) s, \(Int(rate)) readings/s; "
                    + "CPU \(formatted(cpu, digits: 3)) s (user+system), \(Int(Double(count) / cpu)) readings per CPU second\n"
            )
            return 0
        } catch {
            StandardStream.writeError("store-insert: \(error)\n")
            return 1
        }
    }
}

/// `store-writer`: inserts numbered batches for ever, printing `committed N` after each commit. The
/// store's durability test kills it with SIGKILL at random moments and checks what was committed.
enum StoreWriter {
    static let usage = "usage: glucose-gateway-bench store-writer --path FILE [--start N] [--batch N]\n"

    static func run(_ arguments: [String]) async -> Int32 {
        guard let options = BenchOptions(arguments, defaults: ["start": 0, "batch": 20]), let path = options.path,
              let start = options.numbers["start"], let batch = options.numbers["batch"], batch > 0, start >= 0
        else {
            StandardStream.writeError(usage)
            return 64
        }
        do {
            let store = try SQLiteStore(path: path, builders: [BenchBuilder(destination: .nightscout), BenchBuilder(destination: .fhir)])
            var number = start
            while true {
                let readings = (0..<batch).map { benchReading(meter: "AA:BB:CC:00:00:02", sequence: number * batch + $0) }
                try await store.insert(readings)
                StandardStream.writeOutput("committed \(number)\n")
                number += 1
            }
        } catch {
            StandardStream.writeError("store-writer: \(error)\n")
            return 1
        }
    }
}

/// A body builder shaped like a Nightscout entry, so the benchmark pays for building and storing bodies.
private struct BenchBuilder: OutboxBodyBuilder {
    var destination: DestinationName
    func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        guard reading.exclusion == nil, let mgdl = reading.mgdl, let instant = reading.instant else { return nil }
        let body = "{\"type\":\"mbg\",\"mbg\":\(Int(mgdl)),\"date\":\(instant),\"device\":\"\(meter.name ?? meter.address)\",\"seq\":\(reading.sequence)}"
        return OutboxElement(key: "\(destination.rawValue):\(reading.meterAddress):\(reading.sequence):\(reading.userFacingTime.isoString)", body: Array(body.utf8))
    }
}

private func benchReading(meter: String, sequence: Int) -> NewReading {
    let minutes = sequence % 1440
    let time = GlucoseDateTime(naiveSeconds: 1_709_596_800 + Int64(minutes) * 60)  // 2024-03-05, one a minute
    let instant: UnixMillis = 1_709_600_000_000 + Int64(sequence) * 60_000
    return NewReading(
        meterAddress: meter, sequence: sequence, baseTime: time, timeOffsetMinutes: 0, userFacingTime: time,
        utcOffsetMinutes: NewReading.utcOffsetMinutes(userFacingTime: time, meterInstant: instant),
        meterInstant: instant, instant: instant, mgdl: Double(70 + sequence % 150), mmoll: Double(70 + sequence % 150) / 18.016,
        special: nil, unit: .kilogramPerLitre, type: 1, sampleLocation: 1, sensorStatus: nil, analyte: .glucose, context: nil,
        rawMeasurement: [0x0B, UInt8(truncatingIfNeeded: sequence), UInt8(truncatingIfNeeded: sequence >> 8), 0xE8, 0x07, 0x03, 0x05, 0x0E, 0x1E, 0x00, 0x00, 0x00, 0x69, 0xB0, 0x11],
        rawContext: nil, receivedAt: instant + 5_000, exclusion: nil
    )
}

/// User plus system CPU time of the whole process (every thread), in seconds.
private func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
    let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    return user + system
}


private func formatted(_ value: Double, digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = Int((value * scale).rounded())
    let whole = scaled / Int(scale)
    var fraction = String(scaled % Int(scale))
    while fraction.count < digits { fraction = "0" + fraction }
    return "\(whole).\(fraction)"
}

/// `--name value` options: numbers by name, and `--path`.
private struct BenchOptions {
    var numbers: [String: Int]
    var path: String?

    init?(_ arguments: [String], defaults: [String: Int]) {
        numbers = defaults
        var index = 0
        while index < arguments.count {
            let name = arguments[index]
            guard name.hasPrefix("--"), index + 1 < arguments.count else { return nil }
            let key = String(name.dropFirst(2))
            let value = arguments[index + 1]
            if key == "path" {
                path = value
            } else if defaults[key] != nil, let number = Int(value) {
                numbers[key] = number
            } else {
                return nil
            }
            index += 2
        }
    }
}
