import GatewayCore
import GlucoseProfile
import Support
import Transport

/// Nightscout v1 answers a POST with the array of documents it upserted, each as sent plus `_id` when it
/// was newly inserted. An element counts as stored only when it is an object that matches one we sent:
/// by its `identifier`, or (without one) by the collection's `fingerprint`. With `_id` it is new, without
/// it was already there. Anything else in a 2xx answer (`[]`, fewer elements, strings, nulls, empty
/// objects, documents we never sent) confirms nothing: those rows are sent again, like after a 5xx.
/// `noun` names what was sent in the reason ("reading", "treatment").
///
/// The `identifier` of an element we sent is its row's key: the builders write the key there. The sent
/// bodies are parsed only for the fingerprints, and only once an answer element without `identifier`
/// needs them.
func judgeNightscoutV1Answer<Print: Hashable>(_ body: [UInt8], items: [OutboxItem], status: Int, noun: String,
                                              fingerprint: (JSONValue) -> Print?) -> BatchOutcome {
    guard let elements = (try? JSONParser.parse(body))?.arrayValue else {
        // A 2xx we cannot read: the server may have stored the batch; send the same bytes again.
        return .transient(TransientFailure(error: .other("unreadable answer from the server (HTTP \(status))")))
    }
    var byIdentifier: [String: Int64] = [:]
    byIdentifier.reserveCapacity(items.count)
    for item in items { byIdentifier[item.key] = item.id }
    // With every key sent once, the item at an element's place that has the element's identifier is the
    // one the table gives (Nightscout answers in the order sent), so it is taken without a lookup.
    let keysDistinct = byIdentifier.count == items.count
    var fingerprints: [Print: [Int64]]?
    func byFingerprint() -> [Print: [Int64]] {
        if let fingerprints { return fingerprints }
        var made: [Print: [Int64]] = [:]
        for item in items {
            if let sent = try? JSONParser.parse(item.body), let print = fingerprint(sent) { made[print, default: []].append(item.id) }
        }
        fingerprints = made
        return made
    }
    var stored: Set<Int64> = []
    stored.reserveCapacity(items.count)
    var duplicates = 0
    for (place, element) in elements.enumerated() {
        guard case .object = element else { continue }
        var id: Int64?
        if let identifier = element["identifier"] {
            if let text = identifier.stringValue {
                let match = keysDistinct && place < items.count && items[place].key == text ? items[place].id : byIdentifier[text]
                if let match, !stored.contains(match) { id = match }
            }
        } else if let print = fingerprint(element) {
            // No identifier (an older server): the element in full, matched by what it says.
            id = byFingerprint()[print]?.first { !stored.contains($0) }
        }
        guard let id else { continue }
        stored.insert(id)
        if element["_id"] == nil { duplicates += 1 }
    }
    let ids = items.map(\.id)
    // `stored` holds only ids of `items`: as many as there are items, it holds every item's id (and the
    // ids are distinct), so the filters below would keep every id and none.
    let all = stored.count == items.count
    let unconfirmed = all ? [] : ids.filter { !stored.contains($0) }
    let reason = stored.isEmpty
        ? "server answered HTTP \(status) without confirming any of the \(items.count) \(noun)(s) sent"
        : "server answered HTTP \(status) confirming only \(stored.count) of the \(items.count) \(noun)(s) sent"
    return .perElement(stored: all ? ids : ids.filter { stored.contains($0) }, duplicates: duplicates, rejected: [:],
                       retry: unconfirmed, retryReason: reason)
}

/// Nightscout API v1 `entries`.
public struct NightscoutDestination: UploadDestination {
    public let name = DestinationName.nightscout
    public let settings: NightscoutSettings
    let server: UploadServer

    public init(settings: NightscoutSettings, http: any HTTPClient) {
        self.settings = settings
        server = UploadServer(url: settings.url, caFile: settings.caFile, http: http)
    }

    public var origin: String { server.origin }

    var headers: [(String, String)] {
        var h = [("Content-Type", "application/json"), ("Accept", "application/json")]
        if let auth = settings.authHeader { h.append(("api-secret", auth)) }
        return h
    }

    /// Our own credentials as the server could reflect them in an answer: never stored or printed.
    var secrets: [String] {
        [settings.authHeader, settings.apiSecret?.value, settings.token?.value].compactMap { $0 }
    }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        await sendBatch(items, body: batchBody(items, open: [UInt8(ascii: "[")], close: [UInt8(ascii: "]")]),
                        to: server, path: "/api/v1/entries", headers: headers, networkTimeoutMs: networkTimeoutMs,
                        secrets: secrets) { Self.judge($0.body, items: items, status: $0.status) }
    }

    /// What identifies an element we sent when the answer carries no `identifier`.
    struct Fingerprint: Hashable {
        var type: String
        var date: Int64
        var mbg: Double

        init?(_ value: JSONValue) {
            guard let type = value["type"]?.stringValue, let date = value["date"]?.int64Value,
                  let mbg = value["mbg"]?.doubleValue, mbg.isFinite else { return nil }
            self.type = type
            self.date = date
            self.mbg = mbg
        }
    }

    /// An element counts as stored only when it matches one we sent by its `identifier`, or (without one)
    /// by `type`, `date` and `mbg`; see `judgeNightscoutV1Answer`.
    static func judge(_ body: [UInt8], items: [OutboxItem], status: Int) -> BatchOutcome {
        judgeNightscoutV1Answer(body, items: items, status: status, noun: "reading", fingerprint: Fingerprint.init)
    }

    /// `GET /api/v1/verifyauth`, which always answers 200 and says whether the credentials are valid.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = server.check("/api/v1/verifyauth", headers: headers, timeoutMs: timeoutMs)
        return await runCredentialCheck(request, http: server.http) { response in
            if response.status == 401 || response.status == 403 { return .refused("server answered HTTP \(response.status)") }
            guard response.status == 200 else { return .unreachable("server answered HTTP \(response.status)") }
            guard let json = try? JSONParser.parse(response.body), let message = json["message"] else {
                return .unreachable("unreadable answer to the credential check")
            }
            let verdict = ServerText.clean(message["message"]?.stringValue ?? "", redacting: secrets)
            if verdict == "OK" {
                if message["canWrite"]?.boolValue == false { return .refused("credentials accepted but not allowed to write entries") }
                return .accepted
            }
            return .refused(verdict.isEmpty ? "credentials not accepted" : "credentials not accepted (\(verdict))")
        }
    }
}
