import GatewayCore
import GlucoseProfile
import Support
import Transport

/// FHIR R4 server: batch Bundles of conditional creates.
public struct FHIRDestination: UploadDestination {
    public let name = DestinationName.fhir
    public let settings: FHIRSettings
    let server: UploadServer

    public init(settings: FHIRSettings, http: any HTTPClient) {
        self.settings = settings
        server = UploadServer(url: settings.baseURL, caFile: settings.caFile, http: http)
    }

    public var origin: String { server.origin }

    private var headers: [(String, String)] {
        var h = [("Content-Type", "application/fhir+json"), ("Accept", "application/fhir+json")]
        if let token = settings.token { h.append(("Authorization", "Bearer \(token.value)")) }
        return h
    }

    var secrets: [String] { [settings.token?.value].compactMap { $0 } }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        await sendBatch(items, body: batchBody(items, open: Array(#"{"resourceType":"Bundle","type":"batch","entry":["#.utf8),
                                                      close: Array("]}".utf8)),
                        to: server, path: "", headers: headers, networkTimeoutMs: networkTimeoutMs,
                        secrets: secrets) { Self.judge($0.body, items: items, redacting: secrets) }
    }

    /// The status code at the start of an entry's `response.status` ("201 Created"), when it has one.
    static func statusCode(_ text: String?) -> Int? {
        guard let text else { return nil }
        let digits = text.prefix { $0 != " " }
        guard digits.count == 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let code = Int(digits) else { return nil }
        return code
    }

    /// A batch-response Bundle has one entry per request entry, in order, each with `response.status`.
    /// Only a 2xx counts as stored (201 created, 200 found by the conditional create); a 4xx is the
    /// server refusing that reading (with its words); 408, 429, 5xx and anything without a readable
    /// status confirm nothing and are sent again.
    static func judge(_ body: [UInt8], items: [OutboxItem], redacting secrets: [String] = []) -> BatchOutcome {
        guard let parsed = try? JSONParser.parse(body), parsed["resourceType"]?.stringValue == "Bundle",
              let entries = parsed["entry"]?.arrayValue, entries.count == items.count else {
            return .transient(TransientFailure(error: .other("unreadable batch-response from the server")))
        }
        var stored: [Int64] = []
        var duplicates = 0
        var rejected: [Int64: String] = [:]
        var retry: [Int64] = []
        var unreadable = 0
        for (item, entry) in zip(items, entries) {
            let statusText = entry["response"]?["status"]?.stringValue
            switch statusCode(statusText) {
            case 200?: stored.append(item.id); duplicates += 1
            case let code? where (200..<300).contains(code): stored.append(item.id)
            case let code? where code == 408 || code == 429 || (500..<600).contains(code): retry.append(item.id)
            case let code? where (400..<500).contains(code):
                var words = "entry answered \(ServerText.clean(statusText ?? "", redacting: secrets))"
                if let outcome = entry["response"]?["outcome"], let issues = outcome["issue"]?.arrayValue,
                   let first = issues.first, let text = first["diagnostics"]?.stringValue {
                    words += ": " + ServerText.clean(text, redacting: secrets)
                }
                rejected[item.id] = words
            default:
                retry.append(item.id)
                unreadable += 1
            }
        }
        let reason = unreadable > 0
            ? "server answered a batch with \(unreadable) of \(items.count) entries without a usable status"
            : "server answered \(retry.count) of \(items.count) entries with a transient error"
        return .perElement(stored: stored, duplicates: duplicates, rejected: rejected, retry: retry, retryReason: reason)
    }

    /// `GET [base]/metadata` with the token: 401/403 refuse the credentials.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = server.check("/metadata", headers: headers, timeoutMs: timeoutMs)
        do {
            let response = try await server.http.send(request)
            switch response.status {
            case 200..<300: return .accepted
            case 401, 403: return .refused("server answered HTTP \(response.status)")
            default: return .unreachable("server answered HTTP \(response.status)")
            }
        } catch .tooLarge(_, let status) where (200..<300).contains(status) {
            return .accepted  // a large CapabilityStatement: the status is what counts
        } catch {
            return .unreachable(error.description)
        }
    }
}
