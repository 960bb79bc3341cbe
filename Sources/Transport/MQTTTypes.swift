import Support

#if canImport(Glibc)
import Glibc
#endif

/// Where and how to reach an MQTT broker.
public struct MQTTBrokerSettings: Sendable, Equatable {
    public var host: String
    public var port: Int
    /// `mqtts://`: TLS with the peer's certificate and host name verified (system store, or `caFile`).
    public var tls: Bool
    public var username: String?
    public var password: Secret?
    public var caFile: String?
    /// Seconds between keep-alive pings; the broker sends the last will after 1.5 times this without one.
    public var keepAliveSeconds: Int
    /// The client identifier; each process connects with its own.
    public var clientID: String

    public init(host: String, port: Int, tls: Bool = false, username: String? = nil, password: Secret? = nil, caFile: String? = nil,
                keepAliveSeconds: Int = 30, clientID: String = "glucose-gateway-\(getpid())") {
        self.host = host
        self.port = port
        self.tls = tls
        self.username = username
        self.password = password
        self.caFile = caFile
        self.keepAliveSeconds = keepAliveSeconds
        self.clientID = clientID
    }

    /// `mqtt://host:port` or `mqtts://host:port`, for log lines (never the user name or password).
    public var origin: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return (tls ? "mqtts://" : "mqtt://") + shownHost + ":" + String(port)
    }
}

/// One MQTT message.
public struct MQTTMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var retain: Bool
    public init(topic: String, payload: [UInt8], retain: Bool) {
        self.topic = topic
        self.payload = payload
        self.retain = retain
    }
    public init(topic: String, text: String, retain: Bool) {
        self.init(topic: topic, payload: Array(text.utf8), retain: retain)
    }
}

/// Why a QoS 1 publish was not acknowledged. Messages never carry the password or a payload.
public enum MQTTPublishError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not connected to the broker (with the last reason known).
    case notConnected(String)
    /// The broker refused the connection's credentials (CONNACK code).
    case refused(code: Int, String)
    /// Published, but no PUBACK came in time; the broker may or may not have the message.
    case timedOut
    /// The connection broke before the PUBACK came.
    case connectionLost

    public var description: String {
        switch self {
        case .notConnected(let why): "not connected to the broker (\(why))"
        case .refused(let code, let text): "broker refused the connection: \(text) (CONNACK \(code))"
        case .timedOut: "no acknowledgement (PUBACK) before the timeout"
        case .connectionLost: "connection to the broker lost before the acknowledgement"
        }
    }
}

/// What the connection is doing, for `status` and the destination's verdicts.
public enum MQTTConnectionState: Sendable, Equatable {
    case idle
    case connecting
    case connected
    /// The last attempt failed, or the connection broke; the client tries again.
    case disconnected(String)
    /// The broker answered CONNACK with a refusal (4 bad user name or password, 5 not authorized).
    case refused(code: Int, String)
}
