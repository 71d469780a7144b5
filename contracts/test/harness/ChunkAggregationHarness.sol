// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ChunkAggregation} from "../../src/libraries/ChunkAggregation.sol";

/// @title ChunkAggregationHarness
/// @notice Exposes the internal `ChunkAggregation` functions externally, for the forge tests (the
/// court tests build honest round results with it) and the Python parity test
/// (`tests/chain/test_chunk_aggregation_parity.py`).
contract ChunkAggregationHarness {
    /// @notice See `ChunkAggregation.recomputeStateChunk`.
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

    /// @notice keccak256 of the recomputed state chunk (the content hash a fraud proof compares).
    function recomputeHash(
        bytes[] memory gradientChunks,
        uint8 bits,
        uint8 rule,
        uint32 ruleParam,
        bytes memory prevStateChunk,
        uint32 lrPpm,
        uint32 momPpm
    ) external pure returns (bytes32) {
        return keccak256(
            ChunkAggregation.recomputeStateChunk(gradientChunks, bits, rule, ruleParam, prevStateChunk, lrPpm, momPpm)
        );
    }

    /// @notice See `ChunkAggregation.aggregateGradientChunks` (`trim` from `trimCount`).
    function aggregateGradientChunks(
        bytes[] memory gradientChunks,
        uint8 bits,
        uint256 count,
        uint8 rule,
        uint32 ruleParam
    ) external pure returns (int256[] memory) {
        uint256 trim = ChunkAggregation.trimCount(rule, ruleParam, gradientChunks.length);
        return ChunkAggregation.aggregateGradientChunks(gradientChunks, bits, count, rule, trim);
    }

    /// @notice See `ChunkAggregation.isWellFormedGradientChunk`.
    function isWellFormedGradientChunk(bytes memory chunk, uint8 bits, uint256 count) external pure returns (bool) {
        return ChunkAggregation.isWellFormedGradientChunk(chunk, bits, count);
    }

    /// @notice See `ChunkAggregation.decodeGradientChunk`.
    function decodeGradientChunk(bytes memory chunk, uint8 bits, uint256 count)
        external
        pure
        returns (uint256 exponent, int256[] memory values)
    {
        return ChunkAggregation.decodeGradientChunk(chunk, bits, count);
    }

    /// @notice See `ChunkAggregation.dequantize`.
    function dequantize(int256[] memory values, uint256 exponent) external pure returns (int256[] memory) {
        return ChunkAggregation.dequantize(values, exponent);
    }

    /// @notice See `ChunkAggregation.mean`.
    function mean(int256[][] memory rows) external pure returns (int256[] memory) {
        return ChunkAggregation.mean(rows);
    }

    /// @notice See `ChunkAggregation.trimmedMean`.
    function trimmedMean(int256[][] memory rows, uint32 betaBps) external pure returns (int256[] memory) {
        return ChunkAggregation.trimmedMean(rows, betaBps);
    }

    /// @notice See `ChunkAggregation.coordinateMedian`.
    function coordinateMedian(int256[][] memory rows) external pure returns (int256[] memory) {
        return ChunkAggregation.coordinateMedian(rows);
    }

    /// @notice See `ChunkAggregation.floorDiv`.
    function floorDiv(int256 a, int256 b) external pure returns (int256) {
        return ChunkAggregation.floorDiv(a, b);
    }

    /// @notice See `ChunkAggregation.trimCount`.
    function trimCount(uint8 rule, uint32 ruleParam, uint256 n) external pure returns (uint256) {
        return ChunkAggregation.trimCount(rule, ruleParam, n);
    }

    /// @notice See `ChunkAggregation.decodeStateChunk`.
    function decodeStateChunk(bytes memory chunk)
        external
        pure
        returns (int256[] memory weights, int256[] memory momentum)
    {
        return ChunkAggregation.decodeStateChunk(chunk);
    }

    /// @notice See `ChunkAggregation.encodeStateChunk`.
    function encodeStateChunk(int256[] memory weights, int256[] memory momentum) external pure returns (bytes memory) {
        return ChunkAggregation.encodeStateChunk(weights, momentum);
    }

    /// @notice See `ChunkAggregation.nesterovStep`.
    function nesterovStep(
        int256[] memory weights,
        int256[] memory momentum,
        int256[] memory aggregate,
        uint32 lrPpm,
        uint32 momPpm
    ) external pure returns (int256[] memory newWeights, int256[] memory newMomentum) {
        return ChunkAggregation.nesterovStep(weights, momentum, aggregate, lrPpm, momPpm);
    }
}
