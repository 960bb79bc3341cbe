/// The heartbeat: a push to an outside monitor (a healthchecks.io check, an Uptime Kuma push monitor) every
/// `interval` while the gateway is healthy, so that someone hears of a gateway that died or stopped
/// delivering even though meter readings come irregularly.
///
/// This file holds the decision alone: health and time in, what to send and when to look again out. It
/// never sleeps and never sends; `HeartbeatPinger` does both on the injected clock.

import Transport

/// What to do while unhealthy (`heartbeat_on_fail`).
public enum HeartbeatFailMode: String, Sendable, Equatable, CaseIterable {
    /// Send the failure signal with a one-line reason, every interval while the condition lasts.
    case report
    /// Stop pinging: the monitor raises its alarm when the pings stop arriving.
    case silent
}

/// How the monitor expects its pings (`heartbeat_api`).
public enum HeartbeatAPI: String, Sendable, Equatable, CaseIterable {
    /// healthchecks.io (and its self-hosted form): GET the URL when healthy; POST `URL/fail`, the reason
    /// as the body (it logs the first 100 kB of a ping's body) when not.
    case healthchecks
    /// Uptime Kuma push monitors (`/api/push/TOKEN`): GET `URL?status=up&msg=OK` when healthy and
    /// `URL?status=down&msg=REASON` when not.
    case uptimeKuma = "uptime-kuma"
}

/// The heartbeat's settings, from `[gateway]`.
public struct HeartbeatPolicy: Sendable, Equatable {
    public static let defaultIntervalSeconds = 300
    /// An hour: four times the longest wait between upload attempts in a long outage (15 minutes), so an
    /// outage the uploader rides out with a few retries does not raise an alarm, while readings nobody has
    /// seen for an hour do.
    public static let defaultMaxPendingSeconds = 3600
    public static let intervalRange = 1...86_400
    public static let maxPendingRange = 60...604_800

    public var interval: Duration
    public var maxPending: Duration
    public var onFail: HeartbeatFailMode

    public init(interval: Duration = .seconds(HeartbeatPolicy.defaultIntervalSeconds),
                maxPending: Duration = .seconds(HeartbeatPolicy.defaultMaxPendingSeconds),
                onFail: HeartbeatFailMode = .report) {
        self.interval = interval
        self.maxPending = maxPending
        self.onFail = onFail
    }
}

/// The gateway's health as the heartbeat judges it, at one moment.
public struct HeartbeatHealth: Sendable, Equatable {
    /// bluetoothd holds `org.bluez` and answers.
    public var bluetoothdReachable: Bool
    public var adapterPowered: Bool
    /// Destinations that send nothing until a person acts, with why: `paused` (refused credentials),
    /// `disabled` (paused because the server has it turned off, such as treatments without careportal),
    /// `blocked` (a reading the server keeps refusing).
    public var blockedDestinations: [(name: String, state: String)]
    /// Age of the oldest reading not yet acknowledged by every destination, nil when nothing is pending.
    public var oldestUnsentAge: Duration?
    /// An alert the daemon holds while it does no work at all (a damaged database), as a short name.
    public var heldAlert: String?
    /// Paired meters in state `re-pair needed` (they lost their bond and are not downloaded), by address.
    public var repairNeeded: [String]

    public init(bluetoothdReachable: Bool, adapterPowered: Bool, blockedDestinations: [(name: String, state: String)] = [],
                oldestUnsentAge: Duration? = nil, heldAlert: String? = nil, repairNeeded: [String] = []) {
        self.bluetoothdReachable = bluetoothdReachable
        self.adapterPowered = adapterPowered
        self.blockedDestinations = blockedDestinations
        self.oldestUnsentAge = oldestUnsentAge
        self.heldAlert = heldAlert
        self.repairNeeded = repairNeeded
    }

    public static func == (a: HeartbeatHealth, b: HeartbeatHealth) -> Bool {
        a.bluetoothdReachable == b.bluetoothdReachable && a.adapterPowered == b.adapterPowered
            && a.blockedDestinations.map(\.name) == b.blockedDestinations.map(\.name)
            && a.blockedDestinations.map(\.state) == b.blockedDestinations.map(\.state)
            && a.oldestUnsentAge == b.oldestUnsentAge && a.heldAlert == b.heldAlert && a.repairNeeded == b.repairNeeded
    }

    /// The first problem as one line, nil when healthy (a held alert, bluetoothd, the adapter, meters that
    /// need pairing again, destinations, then a reading waiting too long). The text does not change while the condition
    /// lasts (no running ages in it), so a change of text is a change of condition.
    public func problem(maxPending: Duration) -> String? {
        if let heldAlert { return "alert \(heldAlert): not downloading or uploading" }
        if !bluetoothdReachable { return "bluetoothd is not reachable" }
        if !adapterPowered { return "no powered Bluetooth adapter" }
        // A meter that lost its bond is not downloaded at all until a person pairs it again.
        if let first = repairNeeded.first {
            if repairNeeded.count == 1 { return "meter \(first) needs pairing again" }
            return "meters \(repairNeeded.joined(separator: ", ")) need pairing again"
        }
        if let first = blockedDestinations.first {
            let why = switch first.state {
            case "paused": "paused (credentials refused)"
            case "disabled": "paused (turned off on the server)"
            default: "blocked (a reading is refused)"
            }
            return "upload to \(first.name) \(why)"
        }
        if let age = oldestUnsentAge, age >= maxPending {
            return "a reading has waited more than \(maxPending.components.seconds) s to be uploaded"
        }
        return nil
    }
}

/// What the heartbeat sends.
public enum HeartbeatSignal: Sendable, Equatable {
    case ok
    case fail(reason: String)
}

/// One decision: what to send now (nil: nothing) and when to decide again without news (nil: only when
/// the health changes).
public struct HeartbeatDecision: Sendable, Equatable {
    public var send: HeartbeatSignal?
    public var next: ContinuousClock.Instant?
    /// The condition changed since the last decision (healthy, unhealthy with another reason, silenced):
    /// worth one log line.
    public var changed: Bool
}

/// The heartbeat's schedule. A signal goes out at once when the condition changes (healthy → failing, a
/// new reason, failing → healthy, and at start), and otherwise every `interval` after the last one. While
/// healthy it also looks again when the oldest unsent reading reaches `maxPending`, the one change that
/// comes with time rather than with news.
public struct HeartbeatSchedule: Sendable, Equatable {
    public let policy: HeartbeatPolicy
    /// The condition last decided: nil before the first decision; `.ok`, `.fail(reason)`, or the reason
    /// kept quiet in `silent` mode.
    private var condition: Condition?
    private var nextSignal: ContinuousClock.Instant?

    private enum Condition: Equatable {
        case healthy
        case failing(String)
    }

    public init(policy: HeartbeatPolicy) {
        self.policy = policy
    }

    public mutating func decide(_ health: HeartbeatHealth, at now: ContinuousClock.Instant) -> HeartbeatDecision {
        let reason = health.problem(maxPending: policy.maxPending)
        let current: Condition = reason.map(Condition.failing) ?? .healthy
        let changed = current != condition
        condition = current
        let wanted: HeartbeatSignal?
        switch current {
        case .healthy: wanted = .ok
        case .failing(let why): wanted = policy.onFail == .report ? .fail(reason: why) : nil
        }
        var send: HeartbeatSignal?
        if let wanted {
            if changed || nextSignal.map({ now >= $0 }) ?? true {
                send = wanted
                nextSignal = now + policy.interval
            }
        } else {
            nextSignal = nil
        }
        var next = nextSignal
        if current == .healthy, let age = health.oldestUnsentAge {
            let stale = now + (policy.maxPending - age)
            next = next.map { min($0, stale) } ?? stale
        }
        return HeartbeatDecision(send: send, next: next, changed: changed)
    }
}

/// The requests one signal makes, by API. The URL is a capability (anyone holding it can report for this
/// gateway): callers show it only through `HeartbeatTarget.shown`.
public struct HeartbeatTarget: Sendable, Equatable {
    /// The monitor's URL, read once; nil when it is not an `http`/`https` URL (the config lets none through).
    public let url: HTTPURL?
    public var api: HeartbeatAPI

    public init(url: String, api: HeartbeatAPI) {
        self.url = HTTPURL(url)
        self.api = api
    }

    /// The URL's origin only: the path and anything after it carry the monitor's token.
    public var shown: String { url?.origin ?? "(URL)" }

    /// Method, URL and body for `signal`.
    public func request(for signal: HeartbeatSignal) -> (method: String, url: String, body: [UInt8]) {
        let base = url?.appending(path: "").text ?? ""
        switch (api, signal) {
        case (.healthchecks, .ok):
            return ("GET", base, [])
        case (.healthchecks, .fail(let reason)):
            return ("POST", url?.appending(path: "/fail").text ?? "", Array(reason.utf8))
        case (.uptimeKuma, .ok):
            return ("GET", base + "?status=up&msg=OK", [])
        case (.uptimeKuma, .fail(let reason)):
            return ("GET", base + "?status=down&msg=" + Self.queryEscaped(reason), [])
        }
    }

    /// Percent-encoding for a query value: unreserved characters as they are, everything else as %XX.
    static func queryEscaped(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(Character(UnicodeScalar(byte)))
            default:
                let hex = Array("0123456789ABCDEF")
                out += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }
}
