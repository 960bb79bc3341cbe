import GatewayCore

extension MeterDownload.Run {
    /// Keeps the undecodable values taken in since the last commit, raw with their reasons, before the
    /// readings that follow them are committed: nothing the meter sent is dropped, and a re-download that
    /// delivers the same bytes adds nothing (`ReadingStore.keepUndecodable`).
    func keepUndecodable() async throws(Stop) {
        let values = intake.takeUndecodable()
        guard !values.isEmpty else { return }
        do {
            report.undecodableKept += try await download.store.keepUndecodable(values)
        } catch {
            throw .failed(DownloadError(.store, "cannot keep undecodable values: \(error)"))
        }
    }
}
