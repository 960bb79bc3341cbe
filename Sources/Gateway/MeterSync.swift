import GatewayCore

/// What a sync did with one meter.
public struct MeterSyncResult: Sendable, Equatable {
    public enum Status: Sendable, Equatable {
        /// Downloaded (completely or not: see the report's outcome).
        case downloaded(DownloadReport)
        /// Not reachable: not advertising, out of range, or the connection failed.
        case unreachable(String)
        /// The download failed (meter refused the procedure, store failed).
        case failed(DownloadError)
    }
    public var address: String
    public var status: Status

    /// One line for the user, without health values.
    public var summary: String {
        switch status {
        case .downloaded(let r):
            var line = "\(address): \(r.stored) new reading\(r.stored == 1 ? "" : "s")"
            if r.duplicates > 0 { line += ", \(r.duplicates) already stored" }
            switch r.outcome {
            case .completed, .noRecords: break
            case .interrupted(let reason): line += "; interrupted (\(reason)), the next sync resumes"
            case .timedOut: line += "; the meter stopped answering, the next sync resumes"
            }
            if r.counterReset { line += "; the meter's record counter restarted" }
            if let skew = r.skew, abs(skew.seconds) > 120 { line += "; meter clock off by \(skew.seconds) s" }
            return line
        case .unreachable(let why):
            return "\(address): not reachable (\(why))"
        case .failed(let e):
            return "\(address): download failed: \(e.message)"
        }
    }

    public var isComplete: Bool {
        if case .downloaded(let r) = status { return r.outcome.isComplete }
        return false
    }
}

/// `sync`: one download session per paired meter that is reachable.
public struct MeterSync: Sendable {
    public var radio: any MeterRadio
    public var download: MeterDownload
    public var connectTimeout: Duration

    public init(radio: any MeterRadio, download: MeterDownload, connectTimeout: Duration = .seconds(20)) {
        self.radio = radio
        self.download = download
        self.connectTimeout = connectTimeout
    }

    /// Waits up to `wait` for the meter to be seen (zero: try to connect right away), connects and
    /// downloads.
    public func sync(_ meter: MeterInfo, wait: Duration,
                     progress: @escaping @Sendable (DownloadProgress) -> Void = { _ in }) async -> MeterSyncResult {
        let address = meter.address
        if wait > .zero {
            do {
                _ = try await radio.waitForMeter(address: address, timeout: wait)
            } catch {
                return MeterSyncResult(address: address, status: .unreachable(error.message))
            }
        }
        let link: any MeterLink
        do {
            link = try await radio.connect(address: address, timeout: max(connectTimeout, wait))
        } catch {
            return MeterSyncResult(address: address, status: .unreachable(error.message))
        }
        do {
            let report = try await download.run(link: link, meter: meter, progress: progress)
            return MeterSyncResult(address: address, status: .downloaded(report))
        } catch {
            return MeterSyncResult(address: address, status: .failed(error))
        }
    }
}
