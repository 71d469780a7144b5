// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ISynclineConfidential
/// @notice Confidential tasks: attestation parity at enrollment and the sealed-data manifest.
/// Called on the market's address; the market's fallback delegates them to `SynclineCourt`, which
/// forwards them to its `SynclineConfidential` module (all on the market's storage).
///
/// A Confidential task's sponsor names an `IAttestationVerifier` and an allow-list of enclave
/// measurements before anyone enrolls. A trainer enrolls with `enrollAttested` (plain `enroll` is
/// refused) and a witness registers with `registerWitnessEnclave`: each presents an enclave
/// public key, a measurement and an attestation report. The market has the verifier
/// authenticate the report, then requires that the report binds exactly the claimed key, the
/// claimed measurement and the caller as operator, that the measurement is allow-listed and that
/// the key is not admitted for another account of the task. The sponsor then seals the shards to
/// the admitted keys and publishes the manifest (`installSealedManifest`), in versions.
interface ISynclineConfidential {
    /// @notice `pubkey` is no usable X25519 public key: read as RFC 7748 does (the little-endian
    /// u-coordinate: byte 0 of the bytes32 is the least significant), it is non-canonical
    /// (u >= p = 2^255 - 19, the top bit included) or a small-order point (u in {0, 1, p - 1, the
    /// two order-8 u-coordinates}: libsodium's blocklist), to which no shared secret can be agreed.
    error SynclineX25519KeyInvalid(bytes32 pubkey);

    /// @notice Sets the task's attestation policy: its verifier and measurement allow-list (1 to
    /// `MAX_MEASUREMENTS` distinct non-zero digests). Sponsor only, Confidential tier only, while
    /// Enrolling and before the first enrollment, once.
    function configureConfidential(uint256 taskId, address verifier, bytes32[] calldata measurements) external;

    /// @notice `enroll` with an attested enclave: the same stake, deadline, witness and
    /// duplicate checks and the same effects (the enrollment reaching `maxTrainers` starts the
    /// run), after the parity check described above. Emits `EnclaveAdmitted`, then `TrainerEnrolled`.
    /// @return fragment The fragment (slot) the trainer commits for.
    function enrollAttested(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement, bytes calldata report)
        external
        payable
        returns (uint16 fragment);

    /// @notice A listed witness of a Confidential task registers its attested enclave (same parity
    /// checks), once, before the task is sealed or cancelled: the validation shard and the training
    /// shards are sealed to the witnesses' keys too.
    function registerWitnessEnclave(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement, bytes calldata report)
        external;

    /// @notice A listed witness of a task that is NOT Confidential registers its X25519 dispute
    /// key (the HPKE recipient key DP noise openings are sealed to, docs/protocol.md §12.10),
    /// without attestation: once per witness (no rotation), before the task is sealed or
    /// cancelled. Recorded where `getEnclave` returns it, with measurement 0. A Confidential task
    /// reverts `SynclineWitnessKeyNeedsAttestation` (its witnesses attest with
    /// `registerWitnessEnclave`); a small-order or non-canonical key `SynclineX25519KeyInvalid`
    /// (as do the attested paths). The key need not be unique: each witness's key is its own slot,
    /// so registering another witness's key locks that witness out of nothing and reads nothing
    /// (an opening sealed to a key opens only with its private key). Emits `WitnessKeyRegistered`.
    function registerWitnessKey(uint256 taskId, bytes32 pubkey) external;

    /// @notice Publishes a new version of the task's sealed-data manifest (content hash and URI of
    /// the `SealedDatasetManifest` artifact). Sponsor only, Confidential only, until the task is
    /// sealed or cancelled; each call increments the version.
    function installSealedManifest(uint256 taskId, bytes32 manifestHash, string calldata manifestURI) external;

    /// @notice The admitted enclave of `account` in the task, or a witness's registered dispute
    /// key (measurement 0) in a task that is not Confidential (zeros if none).
    function getEnclave(uint256 taskId, address account)
        external
        view
        returns (bytes32 enclavePubkey, bytes32 measurement);

    /// @notice The task's current sealed manifest (version 0: none installed).
    function getSealedManifest(uint256 taskId)
        external
        view
        returns (bytes32 manifestHash, string memory manifestURI, uint32 version);

    /// @notice The task's attestation policy (verifier zero: not configured).
    function getConfidentialConfig(uint256 taskId)
        external
        view
        returns (address verifier, bytes32[] memory measurements);
}
