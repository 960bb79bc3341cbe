#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import GlucoseProfile
@testable import SQLiteStore

/// A fresh directory under /tmp for one test's database, removed by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() throws {
        var template = Array("/tmp/sqlitestore-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return mkdtemp(base) != nil
        }
        guard made else { throw SQLiteStoreError.file(path: "/tmp", operation: "create a directory in", errno: errno) }
        path = template.withUnsafeBufferPointer { buffer in
            String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    var database: String { path + "/gateway.sqlite3" }

    func remove() {
        for suffix in ["", "-wal", "-shm", "-journal"] { unlink(database + suffix) }
        rmdir(path)
    }
}

/// The permission bits of a file, nil when it does not exist.
func fileMode(_ path: String) -> mode_t? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return info.st_mode & 0o777
}

/// A destination that freezes a small JSON body, keyed by meter, sequence and user-facing time, and
/// skips excluded readings.
struct StubBuilder: OutboxBodyBuilder {
    var destination: DestinationName
    func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
        guard reading.exclusion == nil else { return nil }
        let value = reading.mgdl.map { String(Int($0)) } ?? "null"
        let body = "{\"device\":\"\(meter.name ?? meter.address)\",\"seq\":\(reading.sequence),\"mgdl\":\(value),\"date\":\(reading.instant ?? 0)}"
        return OutboxElement(key: "\(destination.rawValue)-\(reading.meterAddress)-\(reading.sequence)-\(reading.userFacingTime)", body: Array(body.utf8))
    }
}

/// A wall time written in a test, `YYYY-MM-DDTHH:MM:SS`.
func testWallTime(_ text: String) -> GlucoseDateTime {
    guard let time = GlucoseDateTime(isoString: text) else { preconditionFailure("not a wall time: \(text)") }
    return time
}

let meterA = "AA:BB:CC:DD:EE:01"
let meterB = "AA:BB:CC:DD:EE:02"

func sampleReading(
    meter: String = meterA, sequence: Int, time: String = "2024-03-05T14:30:00", mgdl: Double? = 105,
    instant: UnixMillis? = 1_709_649_000_000, exclusion: ExclusionReason? = nil, context: ReadingContext? = nil
) -> NewReading {
    let wallTime = testWallTime(time)
    return NewReading(
        meterAddress: meter, sequence: sequence, baseTime: wallTime, timeOffsetMinutes: 0, userFacingTime: wallTime,
        utcOffsetMinutes: instant.map { NewReading.utcOffsetMinutes(userFacingTime: wallTime, meterInstant: $0) },
        meterInstant: instant, instant: instant.map { $0 + Int64(sequence) * 60_000 }, mgdl: mgdl,
        mmoll: mgdl.map { $0 / 18.016 }, special: mgdl == nil ? .nan : nil, unit: .kilogramPerLitre, type: 1, sampleLocation: 1,
        sensorStatus: nil, analyte: .glucose, context: context,
        rawMeasurement: [0x1B, UInt8(truncatingIfNeeded: sequence), 0x00, 0xE8, 0x07, 0x03, 0x05, 0x0E, 0x1E, 0x00],
        rawContext: context == nil ? nil : [0x02, UInt8(truncatingIfNeeded: sequence), 0x00, 0x01],
        receivedAt: 1_709_650_000_000, exclusion: exclusion
    )
}
