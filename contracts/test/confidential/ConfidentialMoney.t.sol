// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ConfidentialTestBase} from "./ConfidentialTestBase.sol";
import {ISynclineEvents} from "../../src/ISynclineEvents.sol";
import {TaskSpec, TaskStatus, Tier, TrainerRecord} from "../../src/SynclineTypes.sol";

/// @notice The money path of a Confidential task: attested trainers' stakes are held, slashed on
/// eviction and returned at the seal exactly as for `enroll` (compared with the same run of a
/// Verified task enrolled the plain way).
contract ConfidentialMoneyTest is ConfidentialTestBase {
    /// @dev Runs the scenario on one task: 4 trainers; trainer 1 misses rounds 0 and 1 (evicted,
    /// 25% slashed); everyone else commits every round; seal. Returns each trainer's credit gain
    /// and the sponsor's.
    function _scenario(bool confidential) internal returns (uint256 id, uint256[5] memory gains) {
        uint256[5] memory before;
        for (uint256 i = 0; i < 4; ++i) {
            before[i] = market.creditOf(trainers[i]);
        }
        before[4] = market.creditOf(sponsor);

        if (confidential) {
            id = _postConfidential();
            for (uint256 i = 0; i < 4; ++i) {
                _enrollAttested(id, trainers[i]);
            }
        } else {
            TaskSpec memory s = _confidentialSpec();
            s.tier = Tier.Verified;
            id = _post(s, POOL);
            _bondAll(id);
            _enrollMany(id, 4);
        }
        vm.assertEq(market.getTaskState(id).stakeHeld, 4 * uint256(STAKE), "stakes held");
        for (uint32 r = 0; r < ROUNDS; ++r) {
            uint256 mask;
            for (uint256 i = 0; i < 4; ++i) {
                if (i == 1 && r < 2) continue;
                if (market.getTrainer(id, trainers[i]).evicted) continue;
                _commit(id, r, trainers[i]);
                mask |= uint256(1) << market.getTrainer(id, trainers[i]).fragment;
            }
            _warpPastDeadline(id);
            _finalize(id, r, mask);
        }
        TrainerRecord memory evicted = market.getTrainer(id, trainers[1]);
        vm.assertTrue(evicted.evicted, "trainer 1 evicted");
        vm.assertEq(uint256(evicted.slashed), (uint256(STAKE) * SLASH_BPS) / 10_000, "25% slashed");
        _warpAndSeal(id);
        vm.assertEq(market.escrowOf(id), 0, "escrow fully paid out");
        for (uint256 i = 0; i < 4; ++i) {
            gains[i] = market.creditOf(trainers[i]) - before[i];
        }
        gains[4] = market.creditOf(sponsor) - before[4];
    }

    function test_attestedTrainers_paidExactlyAsPlainEnrollment_succeeds() public {
        (uint256 plainId, uint256[5] memory plain) = _scenario(false);
        (uint256 confId, uint256[5] memory attested) = _scenario(true);
        vm.assertTrue(plainId != confId, "two tasks");
        uint256 slash = (uint256(STAKE) * SLASH_BPS) / 10_000;
        for (uint256 i = 0; i < 5; ++i) {
            vm.assertEq(attested[i], plain[i], "same credit as plain enrollment");
        }
        uint256 rewards;
        for (uint256 i = 0; i < 4; ++i) {
            uint256 reward = market.getTrainer(confId, trainers[i]).reward;
            if (i == 1) {
                vm.assertEq(reward, 0, "evicted before any accepted work: no reward");
                vm.assertEq(attested[i], STAKE - slash, "evicted: the unslashed stake back");
            } else {
                vm.assertGt(reward, 0, "rewarded");
                vm.assertEq(attested[i], reward + STAKE, "reward + stake back");
            }
            rewards += reward;
        }
        vm.assertEq(rewards + attested[4], POOL + slash, "the pool and the slash: rewards + sponsor dust");
        _assertMoneyInvariant(_two(plainId, confId), _allActors());

        // Once sealed, neither a manifest nor a witness enclave can be added.
        vm.prank(sponsor);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, confId, TaskStatus.Sealed, TaskStatus.Running
            )
        );
        conf.installSealedManifest(confId, keccak256("m"), "ipfs://m");
        address w = witnesses[0];
        bytes memory report = _report(_enclaveKey(w), GOOD, w);
        vm.prank(w);
        vm.expectRevert(
            abi.encodeWithSelector(
                ISynclineEvents.SynclineWrongTaskStatus.selector, confId, TaskStatus.Sealed, TaskStatus.Enrolling
            )
        );
        conf.registerWitnessEnclave(confId, _enclaveKey(w), GOOD, report);
    }
}
