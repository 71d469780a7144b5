// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ChunkAggregation} from "../../src/libraries/ChunkAggregation.sol";

/// @title CourtAggregationHarness
/// @notice Exposes the `ChunkAggregation` functions the court tests need to build honest round
/// results (the new state chunk a correct committee finalizes) and to classify chunks.
contract CourtAggregationHarness {
    function recomputeStateChunk(
        bytes[] memory gradientChunks,
        uint8 bits,
        uint8 rule,
        uint32 ruleParam,
        bytes memory prevStateChunk,
        uint32 lrPpm,
        uint32 momPpm
    ) external pure returns (bytes memory) {
        return ChunkAggregation.recomputeStateChunk(
            gradientChunks, bits, rule, ruleParam, prevStateChunk, lrPpm, momPpm
        );
    }

    function isWellFormedGradientChunk(bytes memory chunk, uint8 bits, uint256 count) external pure returns (bool) {
        return ChunkAggregation.isWellFormedGradientChunk(chunk, bits, count);
    }
}
