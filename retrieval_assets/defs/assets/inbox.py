"""inbox_receipts + the sealed index_version -> inbox_archive: the entries a version took in."""

import pandas as pd
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.core.ingest.inbox import InboxOutcome
from retrieval_assets.core.io.tables import frame_to_receipts
from retrieval_assets.defs.resources import CatalogResource


@asset(group_name="ingest", kinds={"python"})
def inbox_archive(
    context: AssetExecutionContext,
    catalog: CatalogResource,
    inbox_receipts: pd.DataFrame,
    index_version: CandidateRecord,
) -> MaterializeResult:
    """Moves the inbox entries the sealed candidate took in to the archive, each with its outcome
    (indexed, deleted, or rejected with the reason). An unsealed candidate takes nothing in: its
    entries stay pending for the next build. Archived entries are replayed by every later build."""
    inbox = catalog.inbox()
    if inbox is None or not index_version.sealed or inbox_receipts.empty:
        reason = "no inbox" if inbox is None else "not sealed" if not index_version.sealed else "no entries"
        return MaterializeResult(metadata={"archived": 0, "version": index_version.version, "skipped": reason})
    outcomes = {
        row["receipt"]: (InboxOutcome(row["outcome"]), row["reason"], row["detail"])
        for row in frame_to_receipts(inbox_receipts)
    }
    archived = inbox.take_in(index_version.version, outcomes)
    pending = len(inbox.pending())
    context.log.info(f"{archived} inbox entries archived into {index_version.version}; {pending} still pending")
    counts = inbox_receipts["outcome"].value_counts().to_dict()
    return MaterializeResult(
        metadata={
            "archived": archived,
            "version": index_version.version,
            "pending_after": pending,
            "outcomes": MetadataValue.json({k: int(v) for k, v in counts.items()}),
        }
    )
