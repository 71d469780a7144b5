// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ISynclineConfidential} from "./ISynclineConfidential.sol";
import {SynclineCourtCore} from "./SynclineCourtCore.sol";
import {TaskSpec, TaskState, TaskStatus, Tier} from "./SynclineTypes.sol";
import {IAttestationVerifier} from "./attestation/IAttestationVerifier.sol";

/// @title SynclineConfidential
/// @notice Confidential tasks (see `ISynclineConfidential`): the attestation policy, attested
/// enrollment of trainers and registration of witness enclaves, and the sealed-data manifest;
/// and, for every other tier, the witnesses' unattested dispute keys (DP noise openings).
/// `SynclineCourt` creates it and forwards the selectors it does not implement to it by
/// delegatecall, so it runs on the market's storage (its own module: the court has no room left
/// under EIP-170).
/// @dev The only external call is the verifier's `verify`, a static call made before any effect.
contract SynclineConfidential is ISynclineConfidential, SynclineCourtCore {
    /// @notice Most measurements a task's allow-list may hold.
    uint256 public constant MAX_MEASUREMENTS = 16;
    /// @notice Largest attestation report accepted (a TDX quote with its PCK chain is ~5-8 KiB).
    uint256 public constant MAX_REPORT_BYTES = 16_384;
    /// @notice Longest manifest URI, in bytes.
    uint256 public constant MAX_MANIFEST_URI_BYTES = 512;
    /// @dev The field prime of Curve25519, 2^255 - 19.
    uint256 private constant X25519_P = 2 ** 255 - 19;
    /// @dev The two u-coordinates of Curve25519's points of order 8 (RFC 7748, libsodium's blocklist).
    uint256 private constant X25519_ORDER8_A =
        325606250916557431795983626356110631294008115727848805560023387167927233504;
    uint256 private constant X25519_ORDER8_B =
        39382357235489614581723060781553021112529911719440698176882885853963445705823;

    /// @inheritdoc ISynclineConfidential
    function configureConfidential(uint256 taskId, address verifier, bytes32[] calldata measurements)
        external
        onlyDelegated
    {
        TaskState storage t = _requireStatus(taskId, TaskStatus.Enrolling);
        _requireSponsorOfConfidential(taskId, t);
        if (t.enrolled != 0) revert SynclineEnrollmentStarted(taskId, t.enrolled);
        ConfidentialConfig storage c = _confidential[taskId];
        if (c.verifier != address(0)) revert SynclineConfidentialAlreadyConfigured(taskId, c.verifier);
        if (verifier.code.length == 0) revert SynclineVerifierInvalid(verifier);
        uint256 n = measurements.length;
        if (n == 0 || n > MAX_MEASUREMENTS) revert SynclineMeasurementCount(n, MAX_MEASUREMENTS);
        for (uint256 i = 0; i < n; ++i) {
            bytes32 m = measurements[i];
            if (m == bytes32(0) || _measurementAllowed[taskId][m]) revert SynclineMeasurementInvalid(i, m);
            _measurementAllowed[taskId][m] = true;
            c.measurements.push(m);
        }
        c.verifier = verifier;
        emit ConfidentialConfigured(taskId, verifier, measurements);
    }

    /// @inheritdoc ISynclineConfidential
    function enrollAttested(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement, bytes calldata report)
        external
        payable
        onlyDelegated
        returns (uint16 fragment)
    {
        _attest(taskId, enclavePubkey, measurement, report);
        _admit(taskId, enclavePubkey, measurement);
        fragment = _enroll(taskId);
    }

    /// @inheritdoc ISynclineConfidential
    function registerWitnessEnclave(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement, bytes calldata report)
        external
        onlyDelegated
    {
        TaskState storage t = _requireTask(taskId);
        if (t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Enrolling);
        }
        if (!_isWitness[taskId][msg.sender]) revert SynclineNotWitness(taskId, msg.sender);
        if (_enclaves[taskId][msg.sender].pubkey != bytes32(0)) {
            revert SynclineEnclaveAlreadyRegistered(taskId, msg.sender);
        }
        _attest(taskId, enclavePubkey, measurement, report);
        _admit(taskId, enclavePubkey, measurement);
    }

    /// @inheritdoc ISynclineConfidential
    /// @dev Reverts, in order: unknown task, sealed or cancelled, Confidential tier, not a listed
    /// witness, zero key, small-order or non-canonical key, already registered. The key need not
    /// be unique in the task: each witness's key is its own slot, so a witness that registers
    /// another's key (no proof of possession of an X25519 key is possible here) locks nobody out,
    /// and gains nothing: an opening sealed to that key opens only with its private key.
    function registerWitnessKey(uint256 taskId, bytes32 pubkey) external onlyDelegated {
        TaskState storage t = _requireTask(taskId);
        if (t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Enrolling);
        }
        if (_specs[taskId].tier == Tier.Confidential) revert SynclineWitnessKeyNeedsAttestation(taskId);
        if (!_isWitness[taskId][msg.sender]) revert SynclineNotWitness(taskId, msg.sender);
        if (pubkey == bytes32(0)) revert SynclineZeroEnclaveKey();
        _requireX25519(pubkey);
        if (_enclaves[taskId][msg.sender].pubkey != bytes32(0)) {
            revert SynclineEnclaveAlreadyRegistered(taskId, msg.sender);
        }
        _enclaves[taskId][msg.sender] = Enclave(pubkey, bytes32(0));
        emit WitnessKeyRegistered(taskId, msg.sender, pubkey);
    }

    /// @inheritdoc ISynclineConfidential
    function installSealedManifest(uint256 taskId, bytes32 manifestHash, string calldata manifestURI)
        external
        onlyDelegated
    {
        TaskState storage t = _requireTask(taskId);
        if (t.status == TaskStatus.Sealed || t.status == TaskStatus.Cancelled) {
            revert SynclineWrongTaskStatus(taskId, t.status, TaskStatus.Running);
        }
        _requireSponsorOfConfidential(taskId, t);
        uint256 uriLength = bytes(manifestURI).length;
        if (manifestHash == bytes32(0) || uriLength == 0 || uriLength > MAX_MANIFEST_URI_BYTES) {
            revert SynclineManifestInvalid(manifestHash, uriLength, MAX_MANIFEST_URI_BYTES);
        }
        ConfidentialConfig storage c = _confidential[taskId];
        uint32 version = c.manifestVersion + 1;
        c.manifestVersion = version;
        c.manifestHash = manifestHash;
        c.manifestURI = manifestURI;
        emit SealedManifestInstalled(taskId, version, manifestHash, manifestURI);
    }

    /// @inheritdoc ISynclineConfidential
    function getEnclave(uint256 taskId, address account)
        external
        view
        returns (bytes32 enclavePubkey, bytes32 measurement)
    {
        _requireTask(taskId);
        Enclave storage e = _enclaves[taskId][account];
        return (e.pubkey, e.measurement);
    }

    /// @inheritdoc ISynclineConfidential
    function getSealedManifest(uint256 taskId)
        external
        view
        returns (bytes32 manifestHash, string memory manifestURI, uint32 version)
    {
        _requireTask(taskId);
        ConfidentialConfig storage c = _confidential[taskId];
        return (c.manifestHash, c.manifestURI, c.manifestVersion);
    }

    /// @inheritdoc ISynclineConfidential
    function getConfidentialConfig(uint256 taskId)
        external
        view
        returns (address verifier, bytes32[] memory measurements)
    {
        _requireTask(taskId);
        ConfidentialConfig storage c = _confidential[taskId];
        return (c.verifier, c.measurements);
    }

    // ------------------------------------------------------------------ internal

    /// @dev Reverts unless `msg.sender` sponsors the task and the task is Confidential.
    function _requireSponsorOfConfidential(uint256 taskId, TaskState storage t) private view {
        if (msg.sender != t.sponsor) revert SynclineNotSponsor(taskId, msg.sender);
        if (_specs[taskId].tier != Tier.Confidential) revert SynclineNotConfidential(taskId);
    }

    /// @dev The parity check: the claimed measurement must be allow-listed and the key not
    /// admitted for another account; the task's verifier authenticates `report`, which must bind
    /// exactly the claimed key and measurement and `msg.sender` as operator. Changes nothing.
    function _attest(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement, bytes calldata report) private view {
        _requireTask(taskId);
        address verifier = _confidential[taskId].verifier;
        if (verifier == address(0)) revert SynclineConfidentialNotConfigured(taskId);
        if (enclavePubkey == bytes32(0)) revert SynclineZeroEnclaveKey();
        _requireX25519(enclavePubkey);
        if (report.length > MAX_REPORT_BYTES) revert SynclineReportTooLarge(report.length, MAX_REPORT_BYTES);
        if (!_measurementAllowed[taskId][measurement]) revert SynclineMeasurementNotAllowed(taskId, measurement);
        address holder = _enclaveHolder[taskId][enclavePubkey];
        if (holder != address(0) && holder != msg.sender) revert SynclineEnclaveInUse(taskId, enclavePubkey, holder);

        (bytes32 attestedKey, bytes32 attestedMeasurement, address operator,) =
            IAttestationVerifier(verifier).verify(report);
        if (attestedKey != enclavePubkey) revert SynclineAttestationPubkeyMismatch(enclavePubkey, attestedKey);
        if (attestedMeasurement != measurement) {
            revert SynclineAttestationMeasurementMismatch(measurement, attestedMeasurement);
        }
        if (operator != msg.sender) revert SynclineAttestationOperatorMismatch(msg.sender, operator);
    }

    /// @dev Reverts `SynclineX25519KeyInvalid` unless `key` is a usable X25519 public key: its
    /// u-coordinate, the key bytes read little-endian (RFC 7748: byte 0 least significant, so
    /// the bytes32 is byte-reversed first), is canonical (below p, top bit clear) and not a
    /// small-order point (0, 1, p - 1 and the two order-8 points: libsodium's blocklist, whose
    /// p and p + 1 entries are non-canonical here). Honest keys (clamped-scalar multiples of the
    /// base point) always pass.
    function _requireX25519(bytes32 key) private pure {
        uint256 u = uint256(key);
        u = ((u >> 8) & 0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff)
            | ((u & 0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff) << 8);
        u = ((u >> 16) & 0x0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff)
            | ((u & 0x0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff0000ffff) << 16);
        u = ((u >> 32) & 0x00000000ffffffff00000000ffffffff00000000ffffffff00000000ffffffff)
            | ((u & 0x00000000ffffffff00000000ffffffff00000000ffffffff00000000ffffffff) << 32);
        u = ((u >> 64) & 0x0000000000000000ffffffffffffffff0000000000000000ffffffffffffffff)
            | ((u & 0x0000000000000000ffffffffffffffff0000000000000000ffffffffffffffff) << 64);
        u = (u >> 128) | (u << 128);
        if (u < 2 || u >= X25519_P - 1 || u == X25519_ORDER8_A || u == X25519_ORDER8_B) {
            revert SynclineX25519KeyInvalid(key);
        }
    }

    /// @dev Records the attested enclave of `msg.sender`.
    function _admit(uint256 taskId, bytes32 enclavePubkey, bytes32 measurement) private {
        _enclaves[taskId][msg.sender] = Enclave(enclavePubkey, measurement);
        _enclaveHolder[taskId][enclavePubkey] = msg.sender;
        emit EnclaveAdmitted(taskId, msg.sender, enclavePubkey, measurement);
    }
}
