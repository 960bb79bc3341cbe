import GatewayCore
import GlucoseProfile
import Support
import Testing
@testable import MeterCapture

/// The capture file: what the writer writes the reader reads back, and a file from elsewhere (untrusted)
/// is a one-line `CaptureError`, never a crash.
struct CaptureFormatTests {
    static let sample = Capture(
        origin: .simulator(profile: "contour-next-one"), gatewayVersion: "0.1.0", bluezVersion: "5.66-1+deb12u2",
        redacted: ["address", "serial"],
        events: [
            CaptureEvent(milliseconds: 0, kind: .read, uuid: .manufacturerName, value: Array("Ascensia\u{0}".utf8)),
            CaptureEvent(milliseconds: 3, kind: .read, uuid: .serialNumber, withheld: true),
            CaptureEvent(milliseconds: 5, kind: .read, uuid: .currentTime, error: "permanent (ATT error 0x0e)"),
            CaptureEvent(milliseconds: 9, kind: .subscribe, uuid: .glucoseMeasurement),
            CaptureEvent(milliseconds: 12, kind: .write, uuid: .recordAccessControlPoint, value: [0x01, 0x01]),
            CaptureEvent(milliseconds: 20, kind: .value, uuid: .glucoseMeasurement, value: [0x02, 0x01, 0x00, 0xE8, 0x07, 5, 1, 8, 0, 0, 0x6F, 0xB0, 0x11]),
            CaptureEvent(milliseconds: 20, kind: .value, uuid: .isensVendorClockV15, value: []),
            CaptureEvent(milliseconds: 31, kind: .value, uuid: .recordAccessControlPoint, value: [0x06, 0x00, 0x01, 0x01]),
            CaptureEvent(milliseconds: 40, kind: .disconnected, error: "the meter ended the link"),
        ])

    @Test func whatIsWrittenReadsBack() throws {
        let text = Self.sample.text
        let back = try Capture.parse(Array(text.utf8))
        #expect(back == Self.sample)
        #expect(back.readText(.manufacturerName) == "Ascensia")
    }

    @Test func eachEventIsOneLineAndTheHeaderNamesTheMeter() {
        let lines = Self.sample.text.split(separator: "\n")
        #expect(lines.filter { $0.contains("\"op\"") }.count == Self.sample.events.count)
        #expect(lines.contains("  \"address\": \"00:00:5E:00:53:01\","))
        #expect(lines.contains("  \"meter\": {\"manufacturer\":\"Ascensia\"},"))
        #expect(lines.contains("  \"origin\": \"simulator\","))
    }

    @Test func aMeterFileIsNotACapture() throws {
        #expect(!Capture.isCapture(try JSONValue.parse("{\"address\": \"C0:26:DA:01:02:03\"}")))
        #expect(Capture.isCapture(try JSONValue.parse(Self.sample.text)))
    }

    struct Bad: CustomStringConvertible, Sendable {
        var description: String
        var text: String
        var field: String
    }

    static let header = "\"format\": \"glucose-gateway-capture\", \"version\": 1, \"origin\": \"meter\", \"gateway\": \"0.1.0\""
    static func with(_ events: String) -> String { "{" + header + ", \"events\": [" + events + "]}" }

    static let bad: [Bad] = [
        Bad(description: "not JSON", text: "{\"format\": ", field: ""),
        Bad(description: "an array", text: "[1, 2]", field: ""),
        Bad(description: "another format", text: "{\"format\": \"pcap\"}", field: "format"),
        Bad(description: "a later version", text: "{\"format\": \"glucose-gateway-capture\", \"version\": 2}", field: "version"),
        Bad(description: "an unknown member", text: "{" + header + ", \"serial\": \"123\", \"events\": []}", field: "serial"),
        Bad(description: "no events", text: "{" + header + "}", field: "events"),
        Bad(description: "an unknown origin", text: "{\"format\": \"glucose-gateway-capture\", \"version\": 1, \"origin\": \"lab\"}", field: "origin"),
        Bad(description: "a bad address", text: "{" + header + ", \"address\": \"nowhere\", \"events\": []}", field: "address"),
        Bad(description: "an event that is a number", text: with("7"), field: "events[0]"),
        Bad(description: "negative time", text: with("{\"ms\": -1, \"op\": \"read\", \"uuid\": \"2a29\"}"), field: "events[0].ms"),
        Bad(description: "time as text", text: with("{\"ms\": \"0\", \"op\": \"read\", \"uuid\": \"2a29\"}"), field: "events[0].ms"),
        Bad(description: "a huge time", text: with("{\"ms\": 1e300, \"op\": \"read\", \"uuid\": \"2a29\"}"), field: "events[0].ms"),
        Bad(description: "time going back", text: with("{\"ms\": 5, \"op\": \"read\", \"uuid\": \"2a29\"}, {\"ms\": 4, \"op\": \"read\", \"uuid\": \"2a29\"}"), field: "events[1].ms"),
        Bad(description: "an unknown op", text: with("{\"ms\": 0, \"op\": \"erase\", \"uuid\": \"2a52\"}"), field: "events[0].op"),
        Bad(description: "no uuid", text: with("{\"ms\": 0, \"op\": \"read\"}"), field: "events[0].uuid"),
        Bad(description: "a bad uuid", text: with("{\"ms\": 0, \"op\": \"read\", \"uuid\": \"zz\"}"), field: "events[0].uuid"),
        Bad(description: "odd hex", text: with("{\"ms\": 0, \"op\": \"value\", \"uuid\": \"2a18\", \"value\": \"abc\"}"), field: "events[0].value"),
        Bad(description: "a value longer than ATT allows", text: with("{\"ms\": 0, \"op\": \"value\", \"uuid\": \"2a18\", \"value\": \"" + String(repeating: "00", count: 513) + "\"}"), field: "events[0].value"),
        Bad(description: "a value with no bytes", text: with("{\"ms\": 0, \"op\": \"value\", \"uuid\": \"2a18\"}"), field: "events[0].value"),
        Bad(description: "an unknown event member", text: with("{\"ms\": 0, \"op\": \"read\", \"uuid\": \"2a29\", \"key\": \"00\"}"), field: "events[0].key"),
    ]

    @Test(arguments: bad) func aMalformedCaptureIsOneError(_ c: Bad) {
        do {
            _ = try Capture.parse(Array(c.text.utf8))
            Issue.record("\(c.description) was read")
        } catch {
            #expect(error.field == c.field, "\(c.description): \(error)")
            #expect(!error.description.contains("\n"))
        }
    }

    /// Every prefix of a good file, and every file with one byte changed, is read or refused: no crash.
    @Test func cutAndMutatedFilesNeverCrash() {
        let bytes = Array(Self.sample.text.utf8)
        // Every prefix short of the closing brace (the text ends "}\n") is refused.
        var refused = 0
        for n in 0..<(bytes.count - 1) where (try? Capture.parse(Array(bytes.prefix(n)))) == nil { refused += 1 }
        #expect(refused == bytes.count - 1)
        for i in stride(from: 0, to: bytes.count, by: 3) {
            for replacement: UInt8 in [0x00, 0x22, 0x7D, 0xFF] {
                var copy = bytes
                copy[i] = replacement
                _ = try? Capture.parse(copy)
            }
        }
    }
}
