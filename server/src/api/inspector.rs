//! `stepd.v1.InspectorService`: not in this version yet. Every RPC answers
//! UNIMPLEMENTED with reason NOT_IMPLEMENTED.

use stepd_proto::v1::{inspector_service_server::InspectorService, *};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::error::ApiError;

/// Handler of InspectorService.
#[derive(Default)]
pub struct InspectorApi;

fn unimplemented<T>(rpc: &str) -> Result<Response<T>, Status> {
    Err(ApiError::not_implemented(
        &format!("InspectorService.{rpc}"),
        "the server-side inspector",
    )
    .into())
}

// `async_trait` must see the methods, so the macro writes the whole impl.
macro_rules! not_yet {
    ($($method:ident: $req:ty => $resp:ty, $name:literal;)*) => {
        #[tonic::async_trait]
        impl InspectorService for InspectorApi {
            type PrintValueStream = ReceiverStream<Result<PrintValueResponse, Status>>;
            $(
                async fn $method(&self, _: Request<$req>) -> Result<Response<$resp>, Status> {
                    unimplemented($name)
                }
            )*
        }
    };
}

not_yet! {
    inspect: InspectRequest => InspectResponse, "Inspect";
    push: PushRequest => PushResponse, "Push";
    pop: PopRequest => PopResponse, "Pop";
    next_sibling: NextSiblingRequest => NextSiblingResponse, "NextSibling";
    previous_sibling: PreviousSiblingRequest => PreviousSiblingResponse, "PreviousSibling";
    next_page: NextPageRequest => NextPageResponse, "NextPage";
    previous_page: PreviousPageRequest => PreviousPageResponse, "PreviousPage";
    refresh: RefreshRequest => RefreshResponse, "Refresh";
    toggle_view_mode: ToggleViewModeRequest => ToggleViewModeResponse, "ToggleViewMode";
    toggle_pretty_print: TogglePrettyPrintRequest => TogglePrettyPrintResponse, "TogglePrettyPrint";
    show_analytics: ShowAnalyticsRequest => ShowAnalyticsResponse, "ShowAnalytics";
    pin_value: PinValueRequest => PinValueResponse, "PinValue";
    print_value: PrintValueRequest => ReceiverStream<Result<PrintValueResponse, Status>>, "PrintValue";
    tap_value: TapValueRequest => TapValueResponse, "TapValue";
    tap_indexed: TapIndexedRequest => TapIndexedResponse, "TapIndexed";
    clear: ClearRequest => ClearResponse, "Clear";
}
