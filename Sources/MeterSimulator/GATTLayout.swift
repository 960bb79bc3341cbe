import GatewayCore
import Support

/// The attribute table a simulated meter presents, with ATT handles laid out as on an Accu-Chek Guide
/// (GLS from 0x0006, then Device Information). Both front ends build their objects from it: the stand-in
/// uses the handles in object paths (`service0006/char0007/desc0009`), as BlueZ does.
public struct GATTLayout: Sendable, Equatable {
    public struct Characteristic: Sendable, Equatable {
        public var uuid: GATTUUID
        /// Declaration handle (the `charXXXX` path component); the value handle is the next one.
        public var handle: UInt16
        /// BlueZ flag strings: `read`, `write`, `notify`, `indicate`.
        public var flags: [String]
        /// Handle of the Client Characteristic Configuration descriptor, for notify/indicate.
        public var cccdHandle: UInt16?
        /// Whether access needs a bonded, encrypted link (the GLS characteristics of a real meter).
        public var needsBonding: Bool
        public var valueHandle: UInt16 { handle + 1 }
        public var notifies: Bool { flags.contains("notify") || flags.contains("indicate") }
    }

    public struct Service: Sendable, Equatable {
        public var uuid: GATTUUID
        public var handle: UInt16
        public var characteristics: [Characteristic]
    }

    public var services: [Service]

    public init(meter: MeterDescription) {
        var handle: UInt16 = 0x0006
        func next() -> UInt16 { defer { handle += 1 }; return handle }
        var gls = Service(uuid: .glucoseService, handle: next(), characteristics: [])
        func add(_ uuid: GATTUUID, _ flags: [String], to service: inout Service, secure: Bool) {
            let decl = next()
            _ = next()   // value
            let cccd: UInt16? = flags.contains("notify") || flags.contains("indicate") ? next() : nil
            service.characteristics.append(Characteristic(uuid: uuid, handle: decl, flags: flags, cccdHandle: cccd,
                                                          needsBonding: secure))
        }
        let secure = meter.requiresBonding
        add(.glucoseMeasurement, ["notify"], to: &gls, secure: secure)
        if meter.hasContextCharacteristic { add(.glucoseMeasurementContext, ["notify"], to: &gls, secure: secure) }
        add(.glucoseFeature, ["read"], to: &gls, secure: secure)
        add(.recordAccessControlPoint, ["write", "indicate"], to: &gls, secure: secure)
        let clock = meter.clock
        if clock.kind == .glsDateTime {
            add(.dateTime, clock.writable ? ["read", "write"] : ["read"], to: &gls, secure: secure)
        }
        var dis = Service(uuid: .deviceInformationService, handle: next(), characteristics: [])
        for (uuid, _) in meter.deviceInformation.characteristics {
            add(uuid, ["read"], to: &dis, secure: false)
        }
        services = [gls, dis]
        // Clock services come last, so meters without one keep the handles above.
        switch clock.kind {
        case .currentTime:
            var cts = Service(uuid: .currentTimeService, handle: next(), characteristics: [])
            add(.currentTime, clock.writable ? ["read", "write", "notify"] : ["read", "notify"], to: &cts, secure: secure)
            services.append(cts)
        case .vendor:
            var vendor = Service(uuid: .isensVendorService, handle: next(), characteristics: [])
            add(.isensVendorClock, ["write", "notify"], to: &vendor, secure: secure)
            services.append(vendor)
        case .vendorV15:
            var vendor = Service(uuid: .isensVendorServiceV15, handle: next(), characteristics: [])
            add(.isensVendorClockV15, ["write", "notify"], to: &vendor, secure: secure)
            services.append(vendor)
        case .glsDateTime, .none:
            break
        }
    }

    public var allCharacteristics: [Characteristic] { services.flatMap(\.characteristics) }

    public func characteristic(_ uuid: GATTUUID) -> Characteristic? {
        allCharacteristics.first { $0.uuid == uuid }
    }

    /// `service0006`
    public static func hex4(_ v: UInt16) -> String {
        hexString([UInt8(v >> 8), UInt8(truncatingIfNeeded: v)])
    }
}
