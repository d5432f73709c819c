"""Codec of phone diag logs (MobileInsight ``.mi2log`` / ``.qmdl``): frames, log packets and
the LTE messages the trace importers use. Formats: ``shared/docs/diag-log-format.md``."""

from clawbed.traces.diaglog.frames import Defect, crc16_x25, encode_frame
from clawbed.traces.diaglog.log import DecodeStats, DiagLog, LogPacket, decode_bytes, read_log

__all__ = ["Defect", "DecodeStats", "DiagLog", "LogPacket", "crc16_x25", "decode_bytes",
           "encode_frame", "read_log"]
