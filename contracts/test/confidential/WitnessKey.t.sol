// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {SynclineConfidential} from "../../src/SynclineConfidential.sol";
import {SynclineCourt} from "../../src/SynclineCourt.sol";
import {TaskStatus} from "../../src/SynclineTypes.sol";

/// @notice `registerWitnessKey`: a witness of a task that is not Confidential registers the
/// X25519 key DP noise openings are sealed to (docs/protocol.md §12.10). Every revert and the
/// happy path.
contract WitnessKeyTest is ConfidentialTestBase {
    bytes32 internal constant KEY = keccak256("witness-dispute-x25519");

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
        vm.warp(block.timestamp + ENROLL_PERIOD + 1);
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
        conf.registerWitnessKey(id, keccak256("a rotated key"));
    }

    function test_registerWitnessKey_keyOfAnotherWitness_reverts() public {
        uint256 id = _openTask();
        vm.prank(witnesses[0]);
        conf.registerWitnessKey(id, KEY);
        vm.prank(witnesses[1]);
        vm.expectRevert(abi.encodeWithSelector(ISynclineEvents.SynclineEnclaveInUse.selector, id, KEY, witnesses[0]));
        conf.registerWitnessKey(id, KEY);
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
