// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {warpTo} from "../base/Vm.sol";

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {ISynclineConfidential} from "../../src/ISynclineConfidential.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {SynclineConfidential} from "../../src/SynclineConfidential.sol";
import {SynclineCourt} from "../../src/SynclineCourt.sol";
import {TaskStatus} from "../../src/SynclineTypes.sol";

/// @notice `registerWitnessKey`: a witness of a task that is not Confidential registers the
/// X25519 key DP noise openings are sealed to (docs/protocol.md §12.10). Every revert and the
/// happy path; and every path that takes an X25519 key (this one and the attested enclave paths)
/// refuses small-order and non-canonical u-coordinates, read little-endian as RFC 7748 does.
contract WitnessKeyTest is ConfidentialTestBase {
    /// @dev RFC 7748 §6.1's public keys of Alice and Bob (bytes as the RFC prints them).
    bytes32 internal constant KEY = hex"8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
    bytes32 internal constant KEY_B = hex"de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";
    uint256 internal constant P = 2 ** 255 - 19;
    uint256 internal constant ORDER8_A = 325606250916557431795983626356110631294008115727848805560023387167927233504;
    uint256 internal constant ORDER8_B = 39382357235489614581723060781553021112529911719440698176882885853963445705823;

    /// @dev The 32 key bytes of u-coordinate `u`, little-endian (byte 0: least significant).
    function _le(uint256 u) internal pure returns (bytes32 key) {
        bytes memory b = new bytes(32);
        for (uint256 i = 0; i < 32; ++i) {
            b[i] = bytes1(uint8(u >> (8 * i)));
        }
        key = bytes32(b);
    }

    /// @dev Every refused u-coordinate but 0 (which reverts `SynclineZeroEnclaveKey`).
    function _badKeys() internal pure returns (bytes32[] memory keys) {
        uint256[11] memory us = [
            1,
            ORDER8_A,
            ORDER8_B,
            P - 1,
            P,
            P + 1,
            P + 18,
            2 ** 255,
            2 ** 255 + 1,
            2 ** 255 + ORDER8_A,
            type(uint256).max
        ];
        keys = new bytes32[](us.length + 2);
        for (uint256 i = 0; i < us.length; ++i) {
            keys[i] = _le(us[i]);
        }
        // libsodium's has_small_order table, as printed there (little-endian bytes).
        keys[us.length] = hex"e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800";
        keys[us.length + 1] = hex"5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157";
    }

    function _invalid(bytes32 key) internal pure returns (bytes memory) {
        return abi.encodeWithSelector(ISynclineConfidential.SynclineX25519KeyInvalid.selector, key);
    }

    function _openTask() internal returns (uint256 id) {
        id = _postDefault();
        _bondAll(id);
    }

    function test_registerWitnessKey_recordsAndEmits_succeeds() public {
        uint256 id = _openTask();
        address w = witnesses[1];
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessKeyRegistered(id, w, KEY);
        vm.prank(w);
        conf.registerWitnessKey(id, KEY);
        (bytes32 k, bytes32 m) = conf.getEnclave(id, w);
        vm.assertEq(k, KEY, "key");
        vm.assertEq(m, bytes32(0), "no measurement: not attested");
        (bytes32 other,) = conf.getEnclave(id, witnesses[0]);
        vm.assertEq(other, bytes32(0), "only the caller's key");
    }

    function test_registerWitnessKey_whileRunning_succeeds() public {
        uint256 id = _postAndStart();
        vm.assertEq(uint8(market.getTaskState(id).status), uint8(TaskStatus.Running), "running");
        vm.prank(witnesses[2]);
        conf.registerWitnessKey(id, KEY);
        (bytes32 k,) = conf.getEnclave(id, witnesses[2]);
        vm.assertEq(k, KEY, "registered while running");
    }

    function test_registerWitnessKey_unknownTask_reverts() public {
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineUnknownTask.selector, 9));
        conf.registerWitnessKey(9, KEY);
    }

    function test_registerWitnessKey_cancelled_reverts() public {
        uint256 id = _openTask();
        warpTo(block.timestamp + ENROLL_PERIOD + 1);
        market.cancelUnderfilled(id);
        vm.prank(witnesses[0]);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, id, TaskStatus.Cancelled, TaskStatus.Enrolling
            )
        );
        conf.registerWitnessKey(id, KEY);
    }

    function test_registerWitnessKey_confidentialTask_reverts() public {
        uint256 id = _postConfidential();
        vm.prank(witnesses[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineWitnessKeyNeedsAttestation.selector, id));
        conf.registerWitnessKey(id, KEY);
    }

    function test_registerWitnessKey_notWitness_reverts() public {
        uint256 id = _openTask();
        vm.prank(stranger);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, stranger));
        conf.registerWitnessKey(id, KEY);
    }

    function test_registerWitnessKey_trainer_reverts() public {
        uint256 id = _openTask();
        _enroll(id, trainers[0]);
        vm.prank(trainers[0]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineNotWitness.selector, id, trainers[0]));
        conf.registerWitnessKey(id, KEY);
    }

    function test_registerWitnessKey_zeroKey_reverts() public {
        uint256 id = _openTask();
        vm.prank(witnesses[0]);
        vm.expectRevert(ISynclineEvents.SynclineZeroEnclaveKey.selector);
        conf.registerWitnessKey(id, bytes32(0));
    }

    function test_registerWitnessKey_twice_reverts() public {
        uint256 id = _openTask();
        address w = witnesses[0];
        vm.prank(w);
        conf.registerWitnessKey(id, KEY);
        vm.prank(w);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnclaveAlreadyRegistered.selector, id, w));
        conf.registerWitnessKey(id, KEY_B);
    }

    function test_registerWitnessKey_smallOrderOrNonCanonical_reverts() public {
        uint256 id = _openTask();
        bytes32[] memory bad = _badKeys();
        for (uint256 i = 0; i < bad.length; ++i) {
            vm.prank(witnesses[0]);
            vm.expectRevert(_invalid(bad[i]));
            conf.registerWitnessKey(id, bad[i]);
        }
        (bytes32 k,) = conf.getEnclave(id, witnesses[0]);
        vm.assertEq(k, bytes32(0), "nothing recorded");
    }

    /// @dev The byte order: the key bytes are little-endian, so the bytes32 whose big-endian
    /// reading is 1 is u = 2^248 (fine), and the largest canonical u (p - 2) is accepted.
    function test_registerWitnessKey_readsTheKeyLittleEndian_succeeds() public {
        uint256 id = _openTask();
        vm.prank(witnesses[0]);
        conf.registerWitnessKey(id, bytes32(uint256(1)));
        vm.prank(witnesses[1]);
        conf.registerWitnessKey(id, _le(P - 2));
        vm.prank(witnesses[2]);
        vm.expectRevert(_invalid(bytes32(bytes1(0x01))));
        conf.registerWitnessKey(id, bytes32(bytes1(0x01)));
    }

    /// @dev No lock-out: a witness that registers another's key first (it cannot prove possession
    /// of an X25519 key on chain) does not stop that witness registering it. The copy gains the
    /// copier nothing: openings sealed to the key open only with its private key.
    function test_registerWitnessKey_keyCopiedByAnotherWitness_doesNotLockItsHolderOut_succeeds() public {
        uint256 id = _openTask();
        vm.prank(witnesses[1]);
        conf.registerWitnessKey(id, KEY); // the copier is first
        vm.expectEmit(true, true, true, true, address(market));
        emit ISynclineEvents.WitnessKeyRegistered(id, witnesses[0], KEY);
        vm.prank(witnesses[0]);
        conf.registerWitnessKey(id, KEY);
        (bytes32 holder,) = conf.getEnclave(id, witnesses[0]);
        (bytes32 copier,) = conf.getEnclave(id, witnesses[1]);
        vm.assertEq(holder, KEY, "holder registered");
        vm.assertEq(copier, KEY, "each witness's key is its own slot");
    }

    function test_registerWitnessKey_gas_succeeds() public {
        uint256 id = _openTask();
        vm.prank(witnesses[0]);
        uint256 before = gasleft();
        conf.registerWitnessKey(id, KEY);
        uint256 used = before - gasleft();
        vm.assertLt(used, 60_000, "one slot and an event");
    }

    // ------------------------------------------------------------ the attested enclave paths

    function test_enrollAttested_smallOrderKey_reverts() public {
        uint256 id = _postConfidential();
        address t = trainers[0];
        bytes32[] memory bad = _badKeys();
        for (uint256 i = 0; i < bad.length; ++i) {
            bytes memory report = _report(bad[i], GOOD, t); // honestly attested: still refused
            vm.prank(t);
            vm.expectRevert(_invalid(bad[i]));
            conf.enrollAttested{value: STAKE}(id, bad[i], GOOD, report);
        }
    }

    function test_registerWitnessEnclave_smallOrderKey_reverts() public {
        uint256 id = _postConfidential();
        address w = witnesses[0];
        bytes32[] memory bad = _badKeys();
        for (uint256 i = 0; i < bad.length; ++i) {
            bytes memory report = _report(bad[i], GOOD, w);
            vm.prank(w);
            vm.expectRevert(_invalid(bad[i]));
            conf.registerWitnessEnclave(id, bad[i], GOOD, report);
        }
    }

    function test_registerWitnessKey_sameKeyInAnotherTask_succeeds() public {
        uint256 a = _openTask();
        uint256 b = _openTask();
        vm.prank(witnesses[0]);
        conf.registerWitnessKey(a, KEY);
        vm.prank(witnesses[0]);
        conf.registerWitnessKey(b, KEY);
        (bytes32 k,) = conf.getEnclave(b, witnesses[0]);
        vm.assertEq(k, KEY, "per task");
    }

    function test_registerWitnessKey_moduleDirectCall_reverts() public {
        uint256 id = _openTask();
        address module = SynclineCourt(payable(courtModule)).CONFIDENTIAL();
        vm.prank(witnesses[0]);
        vm.expectRevert(ISynclineEvents.SynclineCourtDirectCall.selector);
        SynclineConfidential(module).registerWitnessKey(id, KEY);
    }
}
