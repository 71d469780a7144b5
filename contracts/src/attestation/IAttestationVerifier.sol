// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title IAttestationVerifier
/// @notice Authenticates a TEE attestation report and returns what it binds. A Confidential task
/// names one verifier (`ISynclineConfidential.configureConfidential`); the market calls `verify`
/// (a static call) at every enclave admission and itself compares the returned values with what
/// the enrolling account claims (enclave key, measurement, its own address) and with the task's
/// measurement allow-list. The verifier therefore only has to answer "which enclave, running
/// which code, for which operator, does this report prove?", and revert when it proves nothing.
/// @dev What an implementation must check before returning, and revert with its own custom
/// error otherwise:
/// - The report is well formed and within the size the implementation expects (reject trailing
///   bytes; the market bounds reports at `MAX_REPORT_BYTES`).
/// - The report is signed by a key that chains to the hardware vendor's root: for AMD SEV-SNP the
///   ECDSA P-384 signature of the `ATTESTATION_REPORT` by the chip's VCEK (or VLEK), whose
///   certificate chains through the ASK to the ARK of the product line; for Intel TDX the quote's
///   ECDSA P-256 signature by the attestation key, certified by the QE report signed by the PCK,
///   whose certificate chains through the platform/processor CA to Intel's SGX root CA (with the
///   CRLs checked). Collateral (certificates, CRLs, TCB info) may be supplied in the report or
///   pre-registered in the verifier by a trusted party.
/// - The TCB is acceptable: the reported TCB version (SNP `reported_tcb`, TDX TEE TCB SVN and
///   the TCB info's status) is at or above the verifier's minimum, debug mode is off
///   (SNP `policy.DEBUG = 0`, TDX `TD_ATTRIBUTES.DEBUG = 0`).
/// - The measurement returned is the launch measurement of the guest (SNP `MEASUREMENT`, 48
///   bytes; TDX `MRTD` and the RTMRs, 48 bytes each): it is returned as its keccak256 (or any
///   fixed 32-byte digest the task's allow-list is written in).
/// - The report's user data (SNP `REPORT_DATA`, TDX `REPORTDATA`, 64 bytes each) binds the
///   enclave's public key, the operator account and this chain: for example
///   `keccak256(abi.encode(enclavePubkey, operator, block.chainid, address(this)))` in its first
///   32 bytes. The enclave computes it, so only code holding that key inside that measurement
///   could have produced the report for that operator.
/// - `issuedAt` is the report's issue time (seconds) if the format carries one, else 0; a
///   verifier that enforces freshness does it itself.
interface IAttestationVerifier {
    /// @notice Authenticates `report` and returns what it binds; reverts when it is malformed,
    /// not signed by a trusted key, or below the accepted TCB.
    /// @return enclavePubkey The enclave's X25519 public key the report binds.
    /// @return measurement The (digest of the) launch measurement of the attested code.
    /// @return operator The account the enclave produced the report for.
    /// @return issuedAt When the report was issued (seconds since the epoch; 0 if unknown).
    function verify(bytes calldata report)
        external
        view
        returns (bytes32 enclavePubkey, bytes32 measurement, address operator, uint64 issuedAt);
}
