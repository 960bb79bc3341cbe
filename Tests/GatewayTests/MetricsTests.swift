#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
import Testing
import TestSupport

@testable import Gateway

@Suite struct MetricsTests {
    static let snapshot = MetricsSnapshot(
        readingsStored: 120, readingsExcluded: 2,
        destinations: [
            DestinationMetrics(name: "nightscout", uploaded: 115, pending: 3, quarantined: 0, oldestUnsentAgeSeconds: 540),
            DestinationMetrics(name: "fhir", uploaded: 118, pending: 0, quarantined: 1, oldestUnsentAgeSeconds: nil),
        ],
        connects: 7, connectFailures: ["timeout": 2, "le-connection-abort": 1],
        networkStateCode: 1001, networkStateName: "NETWORK_NOT_CONNECTED", generatedAt: 1_790_000_000_500
    )

    @Test func rendersEveryFigure() {
        let text = PrometheusTextfile.render(Self.snapshot)
        let samples = text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map(String.init)
        #expect(samples == [
            "glucose_gateway_readings_stored_total 120",
            "glucose_gateway_readings_excluded_total 2",
            "glucose_gateway_uploaded_total{destination=\"fhir\"} 118",
            "glucose_gateway_uploaded_total{destination=\"nightscout\"} 115",
            "glucose_gateway_pending{destination=\"fhir\"} 0",
            "glucose_gateway_pending{destination=\"nightscout\"} 3",
            "glucose_gateway_quarantined{destination=\"fhir\"} 1",
            "glucose_gateway_quarantined{destination=\"nightscout\"} 0",
            "glucose_gateway_oldest_unsent_age_seconds{destination=\"fhir\"} 0",
            "glucose_gateway_oldest_unsent_age_seconds{destination=\"nightscout\"} 540",
            "glucose_gateway_meter_connects_total 7",
            "glucose_gateway_meter_connect_failures_total{reason=\"le-connection-abort\"} 1",
            "glucose_gateway_meter_connect_failures_total{reason=\"timeout\"} 2",
            "glucose_gateway_meters_repair_needed 0",
            "glucose_gateway_network_state 1001",
            "glucose_gateway_metrics_timestamp_seconds 1790000000",
        ])
        #expect(text.hasSuffix("\n"))
        #expect(Self.problems(in: text) == [])
    }

    @Test func destinationFiguresFromOutboxCounts() {
        let counts = OutboxCounts(pending: 2, inFlight: 1, acknowledged: 40, quarantined: 1, oldestUnsent: 1_000_000)
        let d = DestinationMetrics(.nightscout, counts: counts, now: 1_090_500)
        #expect(d == DestinationMetrics(name: "nightscout", uploaded: 40, pending: 3, quarantined: 1, oldestUnsentAgeSeconds: 90))
        let none = DestinationMetrics(.fhir, counts: OutboxCounts(acknowledged: 5), now: 1_090_500)
        #expect(none.oldestUnsentAgeSeconds == nil)
        // A clock behind the row's creation never gives a negative age.
        #expect(DestinationMetrics(.fhir, counts: counts, now: 0).oldestUnsentAgeSeconds == 0)
    }

    @Test func metersThatNeedPairingAgainAreCounted() {
        var s = MetricsSnapshot()
        s.metersRepairNeeded = 2
        let text = PrometheusTextfile.render(s)
        #expect(text.contains("# TYPE glucose_gateway_meters_repair_needed gauge\nglucose_gateway_meters_repair_needed 2\n"))
        var daemon = DaemonSnapshot()
        daemon.repairNeeded = ["00:60:19:01:0E:92"]
        #expect(daemon.metrics(now: 0).metersRepairNeeded == 1)
        #expect(Self.problems(in: text) == [])
    }

    @Test func labelValuesAreEscaped() {
        var s = MetricsSnapshot()
        s.connectFailures = ["a\"b\\c\nd": 1]
        let text = PrometheusTextfile.render(s)
        #expect(text.contains("glucose_gateway_meter_connect_failures_total{reason=\"a\\\"b\\\\c\\nd\"} 1\n"))
        #expect(Self.problems(in: text) == [])
    }

    @Test func statusLine() {
        #expect(Self.snapshot.statusLine == "120 readings, 3 pending, 1 quarantined, oldest unsent 9m, last error 1001 NETWORK_NOT_CONNECTED")
        #expect(MetricsSnapshot(readingsStored: 5).statusLine == "5 readings, 0 pending, 0 quarantined, network ok")
        #expect(!Self.snapshot.statusLine.contains("\n"))
    }

    @Test func writeIsAtomicAndReadableByTheExporter() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path + "/gateway.prom"
        try dir.write("gateway.prom", "stale\n", mode: 0o600)

        try PrometheusTextfile.write(Self.snapshot, to: path)
        guard case .success(let bytes) = FileContents.contents(of: path, limit: 1 << 20) else {
            Issue.record("cannot read \(path)")
            return
        }
        #expect(String(decoding: bytes, as: UTF8.self) == PrometheusTextfile.render(Self.snapshot))
        #expect(ConfigFiles.info(path)?.mode == 0o644)
        #expect(Self.names(in: dir.path) == ["gateway.prom"])  // no temporary file left behind
    }

    @Test func writeIntoAMissingDirectoryFailsAndLeavesNothing() {
        do {
            try PrometheusTextfile.write(Self.snapshot, to: "/nonexistent-dir/gateway.prom")
            Issue.record("write must fail")
        } catch {
            #expect(error.message.hasPrefix("metrics file: cannot create /nonexistent-dir/gateway.prom.tmp."))
            #expect(error.message.hasSuffix("No such file or directory"))
        }
    }

    @Test func renameOntoADirectoryFailsAndRemovesTheTemporaryFile() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let target = dir.path + "/taken"
        #expect(mkdir(target, 0o755) == 0)
        defer { rmdir(target) }
        #expect(throws: GatewayFailure.self) { try PrometheusTextfile.write(Self.snapshot, to: target) }
        #expect(Self.names(in: dir.path) == ["taken"])
    }

    static func names(in path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// A check of the text format: HELP/TYPE before samples of their family, names and labels well
    /// formed, values numeric, each family declared once.
    static func problems(in text: String) -> [String] {
        var problems: [String] = []
        var declared: Set<String> = []
        var current: String?
        func isName(_ s: Substring) -> Bool {
            guard let first = s.first, first.isLetter || first == "_" || first == ":" else { return false }
            return s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ", maxSplits: 3)
                guard parts.count == 4, isName(parts[2]) else { problems.append("bad comment: \(line)"); continue }
                if line.hasPrefix("# TYPE ") {
                    if !["counter", "gauge"].contains(parts[3]) { problems.append("bad type: \(line)") }
                    if declared.contains(String(parts[2])) { problems.append("declared twice: \(parts[2])") }
                    declared.insert(String(parts[2]))
                }
                current = String(parts[2])
                continue
            }
            guard let space = line.lastIndex(of: " ") else { problems.append("no value: \(line)"); continue }
            let series = line[..<space]
            if Int64(line[line.index(after: space)...]) == nil { problems.append("bad value: \(line)") }
            let name = series.prefix { $0 != "{" }
            if !isName(name) { problems.append("bad name: \(line)") }
            if String(name) != current { problems.append("sample outside its family: \(line)") }
            if series.count > name.count {
                guard series.hasSuffix("}") else { problems.append("bad labels: \(line)"); continue }
                let labels = series.dropFirst(name.count + 1).dropLast()
                // name="value" pairs; value with \\ \" \n escapes only.
                var rest = Substring(labels)
                while !rest.isEmpty {
                    let labelName = rest.prefix { $0 != "=" }
                    guard isName(labelName), rest.dropFirst(labelName.count).hasPrefix("=\"") else {
                        problems.append("bad label: \(line)"); break
                    }
                    rest = rest.dropFirst(labelName.count + 2)
                    var closed = false
                    while let ch = rest.first {
                        rest = rest.dropFirst()
                        if ch == "\\" {
                            guard let next = rest.first, "\\\"n".contains(next) else { problems.append("bad escape: \(line)"); break }
                            rest = rest.dropFirst()
                        } else if ch == "\"" {
                            closed = true
                            break
                        } else if ch == "\n" {
                            break
                        }
                    }
                    if !closed { problems.append("unterminated label: \(line)"); break }
                    if rest.hasPrefix(",") { rest = rest.dropFirst() }
                }
            }
        }
        return problems
    }
}
