// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {IAttestationVerifier} from "./IAttestationVerifier.sol";

/// @title DevnetAttestationVerifier
/// @notice A simulated attestation verifier for development chains: it trusts one attestation
/// service key (`SERVICE`) to have checked an enclave and to sign what it saw. It proves nothing
/// about hardware: whoever holds the service key can admit any key and measurement.
/// @dev A report is exactly 193 bytes: `abi.encode(enclavePubkey, measurement, operator,
/// issuedAt)` (4 words) followed by the 65-byte signature (r, s, v) of the EIP-712 struct
/// `AttestationReport(bytes32 enclavePubkey,bytes32 measurement,address operator,uint64 issuedAt)`
/// under the domain ("Syncline Devnet Attestation", "1", chain id, this verifier). The domain
/// binds a report to this chain and this verifier; the operator field binds it to one account.
contract DevnetAttestationVerifier is IAttestationVerifier, EIP712 {
    /// @notice EIP-712 type hash of an attestation report.
    bytes32 public constant REPORT_TYPEHASH =
        keccak256("AttestationReport(bytes32 enclavePubkey,bytes32 measurement,address operator,uint64 issuedAt)");
    /// @notice Length of a report: four ABI words and a 65-byte signature.
    uint256 public constant REPORT_LENGTH = 4 * 32 + 65;

    /// @notice The attestation service whose signatures this verifier accepts.
    address public immutable SERVICE;

    /// @notice The service address is zero.
    error DevnetAttestationZeroService();
    /// @notice The report is not exactly `REPORT_LENGTH` bytes.
    error DevnetAttestationBadLength(uint256 length, uint256 expected);
    /// @notice A report word is not a clean encoding of its type (`field`: "operator" or "issuedAt").
    error DevnetAttestationMalformed(string field);
    /// @notice The signature is malformed or malleable (high s, bad v).
    error DevnetAttestationBadSignature();
    /// @notice The report is signed by another key than the trusted service.
    error DevnetAttestationWrongSigner(address signer, address service);

    /// @param service Address of the attestation service's signing key.
    constructor(address service) EIP712("Syncline Devnet Attestation", "1") {
        if (service == address(0)) revert DevnetAttestationZeroService();
        SERVICE = service;
    }

    /// @inheritdoc IAttestationVerifier
    function verify(bytes calldata report)
        external
        view
        returns (bytes32 enclavePubkey, bytes32 measurement, address operator, uint64 issuedAt)
    {
        if (report.length != REPORT_LENGTH) revert DevnetAttestationBadLength(report.length, REPORT_LENGTH);
        uint256 operatorWord;
        uint256 issuedAtWord;
        (enclavePubkey, measurement, operatorWord, issuedAtWord) =
            abi.decode(report[:128], (bytes32, bytes32, uint256, uint256));
        if (operatorWord > type(uint160).max) revert DevnetAttestationMalformed("operator");
        if (issuedAtWord > type(uint64).max) revert DevnetAttestationMalformed("issuedAt");
        // casting to 'uint160' is safe because operatorWord <= type(uint160).max (checked above)
        // forge-lint: disable-next-line(unsafe-typecast)
        operator = address(uint160(operatorWord));
        // casting to 'uint64' is safe because issuedAtWord <= type(uint64).max (checked above)
        // forge-lint: disable-next-line(unsafe-typecast)
        issuedAt = uint64(issuedAtWord);

        bytes32 digest =
            _hashTypedDataV4(keccak256(abi.encode(REPORT_TYPEHASH, enclavePubkey, measurement, operator, issuedAt)));
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, report[128:]);
        if (err != ECDSA.RecoverError.NoError || signer == address(0)) revert DevnetAttestationBadSignature();
        if (signer != SERVICE) revert DevnetAttestationWrongSigner(signer, SERVICE);
    }

    /// @notice The EIP-712 digest the service signs for these fields (for off-chain checks).
    function reportDigest(bytes32 enclavePubkey, bytes32 measurement, address operator, uint64 issuedAt)
        external
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(REPORT_TYPEHASH, enclavePubkey, measurement, operator, issuedAt)));
    }
}
