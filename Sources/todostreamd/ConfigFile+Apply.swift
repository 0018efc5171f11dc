import EventStream
import Relay
import TodoStore

extension ConfigFile {
    /// Applies values (from a file or the environment) to options.
    static func apply(_ values: Values, to options: inout DaemonOptions) throws {
        func address(_ key: String) -> ListenerConfiguration.Address?? {
            if let flag = values[key] as? Bool, flag == false { return .some(nil) }
            guard let text = values[key] as? String else { return .none }
            return .some(text == "off" ? nil : ListenerConfiguration.Address(parsing: text))
        }
        func int(_ key: String) -> Int? { values[key] as? Int }
        if let value = values["data_dir"] as? String { options.dataDirectory = value }
        if let value = values["storage"] as? String, let storage = DaemonOptions.Storage(rawValue: value) {
            options.storage = storage
        }
        if let value = values["postgres_url"] as? String { options.postgresURL = value }
        if let value = int("postgres.pool_size") { options.postgres.poolSize = value }
        if let value = int("postgres.timeout_ms") { options.postgres.timeout = .milliseconds(value) }
        if let value = int("postgres.catch_up_interval_ms") { options.postgres.catchUpInterval = .milliseconds(value) }
        if let value = int("postgres.commit_follow_grace_us") {
            options.postgres.commitFollowGrace = .microseconds(value)
        }
        if let value = int("postgres.staging_cache_todos") { options.postgres.stagingGuesses = value }
        if let value = int("postgres.startup_timeout_ms") { options.postgres.startupTimeout = .milliseconds(value) }
        if let value = int("postgres.max_pending_writes") { options.postgres.maxPendingWrites = value }
        if let value = values["log_level"] as? String { options.logLevel = value }
        if let value = values["allow_insecure"] as? Bool { options.allowInsecure = value }
        if let value = address("listen.tcp") { options.listeners.tcp = value }
        if let value = address("listen.http") { options.listeners.http = value }
        if let value = address("listen.tls") { options.listeners.tls = value }
        if let value = values["tls.cert"] as? String { options.tlsCertificatePath = value }
        if let value = values["tls.key"] as? String { options.tlsKeyPath = value }
        if let value = values["tls.client_ca"] as? String { options.tlsClientCAPath = value }
        if let value = values["tls.http"] as? Bool { options.listeners.httpTLS = value }
        if let value = values["tls.dev"] as? Bool { options.devTLS = value }
        if let value = int("tls.close_timeout_ms") { options.tlsCloseTimeout = .milliseconds(Int64(value)) }
        if let list = values["auth.tokens"] as? [Any] {
            var tokens: [TokenEntry] = []
            for case let entry as [String: Any] in list {
                guard let role = (entry["role"] as? String).flatMap(Role.init(rawValue:)) else { continue }
                if let plain = entry["token"] as? String {
                    tokens.append(TokenEntry(sha256: TokenEntry.digest(plain), role: role))
                }
                if let hashed = entry["token_sha256"] as? String {
                    tokens.append(TokenEntry(sha256: hashed.lowercased(), role: role))
                }
            }
            options.tokens = tokens
        }
        if let list = values["websocket.allowed_origins"] as? [String] { options.relay.allowedOrigins = list }
        if let value = values["websocket.compression"] as? Bool { options.relay.webSocketCompression = value }
        if let list = values["monitor.redact_fields"] as? [String] { options.relay.monitorRedactedFields = list }
        if let value = int("websocket.compress_min_bytes") { options.relay.webSocketCompressMinBytes = value }
        if let value = int("limits.max_frame_bytes") { options.relay.maxFrameBytes = value }
        if let value = int("limits.websocket_max_message_bytes") { options.relay.webSocketHardCapBytes = value }
        if let value = int("limits.max_queue_bytes") { options.relay.maxQueueBytes = value }
        if let value = int("limits.max_queue_frames") { options.relay.maxQueueFrames = value }
        if let value = int("limits.slow_consumer_grace_ms") { options.relay.slowConsumerGraceMs = value }
        if let value = int("limits.slow_consumer_check_ms") { options.relay.slowConsumerCheckMs = value }
        if let value = int("limits.max_pipelined_frames") { options.relay.maxPipelinedFrames = value }
        if let value = int("limits.max_subscriptions") { options.relay.maxSubscriptions = value }
        if let value = int("limits.max_connections") { options.relay.maxConnections = value }
        if let value = int("limits.max_connections_per_ip") { options.relay.maxConnectionsPerIP = value }
        if let value = int("limits.http_reserve_connections") { options.relay.httpReserveConnections = value }
        if let value = int("limits.rate_limit_per_second") { options.relay.rateLimitPerSecond = Double(value) }
        if let value = int("limits.rate_limit_burst") { options.relay.rateLimitBurst = Double(value) }
        if let value = int("limits.unauthenticated_idle_seconds") { options.relay.unauthenticatedIdleSeconds = value }
        if let value = int("limits.handshake_timeout_ms") { options.relay.handshakeTimeoutMs = value }
        if let value = int("limits.initial_hold_ms") { options.relay.initialHoldMs = value }
        if let value = int("limits.socket_send_buffer_bytes") {
            options.relay.socketSendBufferBytes = value == 0 ? nil : value
        }
        if let value = int("limits.tcp_keepalive_seconds") {
            options.relay.tcpKeepaliveSeconds = value == 0 ? nil : value
        }
        if let value = int("journal.max_entries") { options.retention.maxEntries = UInt64(value) }
        if let value = int("journal.max_age_seconds") { options.retention.maxAgeSeconds = UInt64(value) }
        if let value = int("store.max_batch") { options.maxBatch = value }
        if let value = int("store.list_row_cache") { options.listRowCache = value }
        if let value = int("store.sequencer_spin_us") { options.sequencerSpinMicroseconds = value }
        if let value = values["store.sequencer_handover_thread"] as? Bool { options.handOverThread = value }
        if let value = int("store.sequencer_gather_us") { options.sequencerGatherMicroseconds = value }
        if let value = int("store.max_queued_requests") { options.maxQueuedRequests = value }
        if let value = values["store.synchronous"] as? String { options.synchronousFull = value == "full" }
        if let value = int("store.sqlite_wal_write_buffer_kib") { options.walWriteBufferBytes = value * 1024 }
        if let value = int("store.sqlite_cache_kib") { options.sqliteCacheKiB = value }
        if let value = int("store.sqlite_page_bytes") {
            guard GroupCommitStore.isSQLitePageSize(value) else {
                throw ConfigError(message: "store.sqlite_page_bytes is \(value), not a power of two from 512 to 65536")
            }
            options.sqlitePageBytes = value
        }
        if let value = int("store.sqlite_deferred_todos") { options.sqliteDeferredTodos = value }
        if let value = int("shutdown.drain_timeout_ms") { options.relay.drainTimeoutMs = value }
        if let value = int("shutdown.reconnect_after_ms") { options.relay.drainReconnectAfterMs = value }
    }
}
