import GatewayCore
import Support

/// The meter-side keys of `[gateway]`: which adapter, how to scan, the meters' time zone and clocks, and the
/// download's timing. Read and checked here, once; `downloadOptions` is the one place a download's options
/// come from the config.
public struct MeterDownloadConfig: Sendable, Equatable {
    /// The section the keys are written in.
    public static let section = "gateway"
    public static let keys = [
        "adapter", "time_zone", "clock_skew_correction", "clock_skew_threshold_s", "download_idle_timeout_s", "scan_mode",
        "future_tolerance_s", "set_meter_clock",
    ]
    public static let clockSkewThresholdRange = 0...86_400
    public static let downloadIdleTimeoutRange = 5...600
    public static let futureToleranceRange = 0...86_400

    /// Adapter name (`hci0`) or address; nil: the first powered adapter.
    public var adapter: String?
    /// IANA zone for meters paired without `--timezone`; nil: the system zone.
    public var timeZone: String?
    /// Correct meter times when the meter clock is off by more than the threshold.
    public var clockSkewCorrection: Bool = ClinicalSettings().clockSkewCorrection
    public var clockSkewThresholdSeconds: Int = ClinicalSettings().clockSkewThresholdSeconds
    /// `set_meter_clock`: write the gateway's time to a meter whose clock is off by more than the threshold
    /// (opt-in: it writes to a medical device).
    public var setMeterClock: Bool = false
    /// Readings more than this far ahead of the gateway's clock at download are kept as `time-in-future`.
    public var futureToleranceSeconds: Int = ClinicalSettings().futureToleranceSeconds
    /// A download with no data for this long is abandoned (and retried on the next connection).
    public var downloadIdleTimeoutSeconds: Int = Int(DownloadOptions().inactivityTimeout.components.seconds)
    public var scanMode: ScanMode = .discovery

    public init() {}

    public init(section s: inout ConfigSection) {
        let name = s.name
        if let v = s.string("adapter") {
            if Self.isAdapterName(v.value) { adapter = v.value } else {
                s.problem(v.line, "\(name).adapter: expected an adapter name such as \"hci0\" or an address such as \"00:1A:7D:DA:71:13\"")
            }
        }
        if let v = s.string("time_zone") {
            if let message = Self.timeZoneProblem(v.value) { s.problem(v.line, "\(name).time_zone: \(message)") } else { timeZone = v.value }
        }
        if let v = s.bool("clock_skew_correction") { clockSkewCorrection = v.value }
        if let v = s.integer("clock_skew_threshold_s", in: Self.clockSkewThresholdRange) { clockSkewThresholdSeconds = v.value }
        if let v = s.bool("set_meter_clock") { setMeterClock = v.value }
        if let v = s.integer("future_tolerance_s", in: Self.futureToleranceRange) { futureToleranceSeconds = v.value }
        if let v = s.integer("download_idle_timeout_s", in: Self.downloadIdleTimeoutRange) { downloadIdleTimeoutSeconds = v.value }
        if let mode = s.choice("scan_mode", ScanMode.init(rawValue:), expected: "\"discovery\" or \"profile\"") { scanMode = mode }
    }

    /// The options of every download (`sync` and the daemon).
    public var downloadOptions: DownloadOptions {
        DownloadOptions(
            inactivityTimeout: .seconds(downloadIdleTimeoutSeconds),
            clinical: ClinicalSettings(clockSkewCorrection: clockSkewCorrection, clockSkewThresholdSeconds: clockSkewThresholdSeconds,
                                       futureToleranceSeconds: futureToleranceSeconds),
            setMeterClock: setMeterClock
        )
    }

    public var summaryLines: [String] {
        ["adapter: \(adapter ?? "(first powered)")", "time_zone: \(timeZone ?? "(system)")",
         "clock_skew_correction: \(clockSkewCorrection)", "clock_skew_threshold_s: \(clockSkewThresholdSeconds)",
         "set_meter_clock: \(setMeterClock)", "future_tolerance_s: \(futureToleranceSeconds)",
         "download_idle_timeout_s: \(downloadIdleTimeoutSeconds)", "scan_mode: \(scanMode.rawValue)"]
    }

    static func isAdapterName(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        if text.hasPrefix("hci") {
            let digits = bytes.dropFirst(3)
            return !digits.isEmpty && digits.count <= 3 && digits.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    static let zoneDirectory = "/usr/share/zoneinfo"

    /// An IANA name such as "Europe/Berlin"; checked against the zone database when one is installed.
    static func timeZoneProblem(_ name: String) -> String? {
        let allowed = name.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/_+-".unicodeScalars.contains($0))
        }
        guard allowed, !name.hasPrefix("/"), !name.split(separator: "/").contains("..") else {
            return "expected an IANA time zone name such as \"Europe/Berlin\""
        }
        if name == "UTC" { return nil }
        guard ConfigFiles.info(zoneDirectory)?.isDirectory == true else { return nil }
        guard ConfigFiles.info(zoneDirectory + "/" + name)?.isRegular == true else {
            return "unknown time zone (not in \(zoneDirectory))"
        }
        return nil
    }
}
